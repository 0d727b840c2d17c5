"""The training job script, rendered by the pretrain role's own template and variables (through
ansible-playbook, as the pipeline renders it) for a few inventories, against the scripts kept in
tests/unit/golden/pretrain/: a change to what a job runs shows as a diff of those files in review.

    LLMTRAIN_GOLDEN=write PYTHONPATH=.collections pytest tests/unit/test_job_script.py

writes them anew (then read the diff). The cases: our trainer (the README's required variables
only), your own script with its working directory and W&B, restarts inside the job with the
a progress pattern, and a Charliecloud container without the network check or the hang watch."""

import json
import os
import shlex
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "unit", "golden", "pretrain")
BIN = os.path.dirname(sys.executable)
REQUIRED = dict(slurm_nodes=3, slurm_gpus_per_node=0, slurm_procs_per_node=2, slurm_workspace="/shared/llm work",
                slurm_python="/shared/venv/bin/python")
CASES = {
    "ours": dict(REQUIRED),
    "own-script": dict(REQUIRED, run_script="train.py", run_script_chdir="work dir", pretrain_script_args=["--lr", "3e-4"],
                       run_wandb_project="gpt", run_wandb_entity="team", pretrain_progress_tag="train/loss"),
    "restarts-in-job": dict(REQUIRED, pretrain_restarts_in_job=2,
                            pretrain_progress_regex=["^step (?P<step>\\d+) loss (?P<loss>[0-9.]+)"],
                            pretrain_hang_timeout=600, run_requeue_max=1, slurm_master_port=29500),
    "container": dict(REQUIRED, slurm_container_runtime="charliecloud", slurm_container_image="/shared/img/torch",
                      slurm_container_mounts=["/data"], pretrain_hang_timeout=0, pretrain_network_check=False),
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """{case: the job script the pretrain role renders for it}, from one ansible-playbook run."""
    work = tmp_path_factory.mktemp("golden")
    plays = []
    for name, values in CASES.items():
        values = dict(values, run_name="golden-" + name, ansible_python_interpreter=sys.executable)
        if "run_script" in values:
            values["run_script"] = os.path.join(GOLDEN, values["run_script"])
        plays.append({
            "name": name, "hosts": "localhost", "connection": "local", "gather_facts": False, "vars": values,
            "tasks": [
                {"name": "Load the pretrain role's variables (its input checks run)",
                 "ansible.builtin.include_role": {"name": "llmtrain.slurm.pretrain", "tasks_from": "validate",
                                                  "public": True}},
                {"name": "Render the job script",
                 "ansible.builtin.copy": {
                     "content": "{{ lookup('ansible.builtin.template', '%s') }}" % os.path.join(
                         ROOT, "roles", "pretrain", "templates", "pretrain.sbatch.j2"),
                     "dest": str(work / (name + ".sbatch")), "mode": "0644"}},
            ]})
    playbook = work / "render.yml"
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_HOME=str(work / "home"))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", str(playbook)], cwd=str(work),
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert proc.returncode == 0, proc.stdout.decode()[-4000:]
    # the source's path is the checkout's: the golden files name where tests/unit/golden lies as <golden>
    return {name: (work / (name + ".sbatch")).read_text().replace(GOLDEN, "<golden>") for name in CASES}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_rendered_job_script_is_the_kept_one(rendered, case):
    path = os.path.join(GOLDEN, case + ".sbatch")
    if os.environ.get("LLMTRAIN_GOLDEN") == "write":
        with open(path, "w") as f:
            f.write(rendered[case])
    with open(path) as f:
        kept = f.read()
    assert rendered[case] == kept, ("the job script of case %s changed: if that is meant, write the golden files "
                                    "anew (LLMTRAIN_GOLDEN=write) and review their diff" % case)


def job_config(script):
    """The JSON the script gives llmtrain_node.job, and the training step's command after it."""
    line = script[script.index(" -m llmtrain_node.job "):]
    words = shlex.split(line.replace("\\\n", " "), comments=False)
    return json.loads(words[2]), words[4:]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_script_is_bash_and_gives_the_job_its_settings(rendered, case):
    script = rendered[case]
    assert subprocess.run(["bash", "-n"], input=script.encode(), check=False).returncode == 0
    config, step = job_config(script)
    assert config["run_dir"] == "/shared/llm work/golden-" + case
    assert step[0] == "srun" and "--kill-on-bad-exit=1" in step and "torch.distributed.run" in step[step.index("-c") + 1]
    assert all(isinstance(w, str) for check in config["checks"] for w in check)
    assert config["checks"][0][:2] == ["bash", "/shared/llm work/golden-%s/scripts/node_check.sh" % case]
    assert (len(config["checks"]) == 2) == (case != "container")  # the network check, unless turned off
    assert (config["hang"] is None) == (case == "container")
    assert (config["script_chdir"] is not None) == (config["wandb_run"] is not None) == (case == "own-script")
    assert int(config["requeue_max"]) == (1 if case == "restarts-in-job" else 3)  # run_requeue_max
