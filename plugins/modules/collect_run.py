#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: collect_run
short_description: Bring a training run's metrics, logs, checkpoints' names and facts to the controller and write its report
description:
  - The pretrain role's collect step, in one task. On the cluster, three module calls and one write -
    M(llmtrain.slurm.read_files) (the records the earlier stages and the job left, the names in
    C(checkpoints/), your script's TensorBoard event files and Hugging Face Trainer state),
    M(llmtrain.slurm.fetch_files) (the metrics, the nodes' step times, the starts, the job's log, the
    hangs' summaries, the TensorBoard event files and offline W&B runs - only the files that differ
    from the controller's copy, none beyond C(pretrain_fetch_max_mb), none outside the run directory),
    M(llmtrain.slurm.run_ledger) (what the run used, one C(sacct) call) and M(llmtrain.slurm.put_files)
    (C(facts.json) kept in the run directory, so that a controller that did not watch the job gets
    the same report).
  - On the controller, in the action plugin - where your script wrote no C(LLMTRAIN_METRICS_FILE), its
    loss from its TensorBoard event files (else Lightning's C(metrics.csv)), else from its log lines
    (C(pretrain_progress_regex)), into C(runs/<run_name>/metrics.jsonl); the run's facts
    (C(runs/<run_name>/facts.json), plugins/module_utils/rundir/run_facts.py); C(report.md) and C(loss.png)
    (M(llmtrain.slurm.run_report)).
  - Your script's event files are read oldest first, each record's framing checked by its CRCs (one that
    fails is counted as unreadable, a last record cut short is left out). The loss's tag is
    C(pretrain_progress_tag), else the first found of C(train_loss), C(train_loss_step), C(train/loss),
    C(loss_metrics/global_avg_loss), C(lm loss), C(loss/train), C(training_loss), C(loss); a value of another
    tag (C(val_loss), C(lr), C(tokens_per_s)) goes on the record of its step. Each record's total is
    C(pretrain_progress_total_steps), else the last of the trainers' step flags in C(pretrain_script_args)
    (C(--max_steps), C(--max-steps), C(--trainer.max_steps), C(--max_iters), C(--train-iters),
    C(--training.steps), C(--num_train_steps)), else a Hugging Face Trainer's C(max_steps).
  - Reads the run's variables from the play (C(run_dir), C(run_local_dir), C(run_script),
    C(run_code_chdir), C(run_wandb_project), C(slurm_python), C(pretrain_fetch_max_mb),
    C(pretrain_progress_regex), C(pretrain_progress_tag), C(pretrain_progress_total_steps),
    C(pretrain_script_args)), and those the run's facts name (C(run_name), C(pretrain_model), your script's
    C(run_code_script), C(run_source_dir) and C(run_source), C(slurm_partition), C(slurm_gpus_per_node),
    C(slurm_procs_per_node), C(pretrain_signal_lead), C(run_gpu_policy), C(pretrain_straggler_threshold),
    C(slurm_exclude_nodes)); the module itself refuses to run.
  - Each file left on the cluster is said in a warning, with why.
version_added: 0.3.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  stage:
    description:
      - Which stage's results - C(train), the collect step above; C(generate), the samples job's output
        (C(samples.json), or your C(inference_script)'s C(samples.txt), at most 1 MiB) to
        C(runs/<run_name>/samples.txt), failing with why when it cannot be read; C(export), what the
        export job wrote (C(export/exported.json) and the evaluation, at most 64 KiB each) with O(model) to
        C(runs/<run_name>/model.json). Either rewrites the report when its file changed.
    type: str
    choices: [train, generate, export]
    default: train
  model:
    description: With O(stage=export), the model - C(model_dir), C(name), C(checkpoint) and the export job's C(job_id).
    type: dict
  evaluate:
    description: With O(stage=export), the job evaluated the model (its C(eval/<name>.json) is read).
    type: bool
    default: false
  job:
    description:
      - The training job as the watch last saw it (M(llmtrain.slurm.sbatch)'s C(jobs[0])), or the
        record of the finished job; its C(stdout_path) names the log fetched.
    type: dict
    default: {}
  job_id:
    description:
      - The job's id, where O(job) names none; empty for none.
    type: str
    default: ""
  watch:
    description:
      - The watching task's result (M(llmtrain.slurm.sbatch)'s, with C(jobs), C(log), C(node_check) and
        C(network_check)). Once the run is collected and its report written, a job it watched to a bad end
        fails the step, saying why - a requeued job waiting for nodes that are out of service (named, with
        the newest checkpoint it resumes from), a job whose dependency can never be met, or a job that
        failed (its state, exit code, the failing rank's traceback and the checks' findings).
    type: dict
    default: {}
  reuse:
    description:
      - The run is not watched now, so the facts the watch kept in the run directory are used as they are.
    type: bool
    default: false
notes:
  - Supports check mode, in which it reads and writes nothing on the controller.
"""

EXAMPLES = r"""
- name: Collect the run (metrics, logs, checkpoints, facts, report)
  llmtrain.slurm.collect_run:
    job: "{{ _pretrain_seen }}"
    job_id: "{{ _pretrain_job_id }}"
    reuse: "{{ not _pretrain_watched }}"
  register: _pretrain_collect
"""

RETURN = r"""
path:
  description: With O(stage=generate) or O(stage=export), the file written on the controller.
  returned: stage generate or export
  type: str
  sample: /home/user/llmtrain/runs/tiny/model.json
model:
  description: With O(stage=export), what C(model.json) holds.
  returned: stage export
  type: dict
checkpoints:
  description: The run's checkpoints by name, oldest first.
  returned: stage train
  type: list
  elements: str
  sample: [step_000050.pt, step_000100.pt]
facts:
  description: The run's facts (plugins/module_utils/rundir/run_facts.py).
  returned: stage train
  type: dict
refused:
  description: Path in the run directory -> why it stays there.
  returned: stage train
  type: dict
  sample: {"/shared/ws/tiny/metrics.jsonl": "/shared/ws/tiny/metrics.jsonl is not fetched: it leads to /home/u/x, outside the run directory /shared/ws/tiny."}
fetched:
  description: The names under C(runs/<run_name>/) copied now.
  returned: stage train
  type: list
  elements: str
report:
  description: The path of C(report.md).
  returned: success, not in check mode
  type: str
report_warnings:
  description: What the report could not read or draw (M(llmtrain.slurm.run_report)).
  returned: success, not in check mode
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(stage=dict(type="str", default="train", choices=["train", "generate", "export"]),
                                              model=dict(type="dict"), evaluate=dict(type="bool", default=False),
                                              job=dict(type="dict", default={}), job_id=dict(type="str", default=""), watch=dict(type="dict", default={}),
                                              reuse=dict(type="bool", default=False)), supports_check_mode=True)
    module.fail_json(msg="llmtrain.slurm.collect_run runs in its action plugin, on the controller: run it as a task's "
                         "action llmtrain.slurm.collect_run in the pretrain role's play")


if __name__ == "__main__":
    main()
