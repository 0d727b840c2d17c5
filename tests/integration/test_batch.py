"""Batch inference on the local cluster: playbooks/batch.yml generates a prompts file over 3 nodes x 2
ranks and brings runs/<run>/generations.jsonl back complete and in the prompts' order; a batch job
requeued while it generates makes only the prompts without a record; a rerun submits nothing; a bad
prompts file stops the play before anything is submitted."""

import glob
import json
import os
import re
import shutil

import pytest

from cluster import NODES, RUNS, WORKSPACE, BackgroundPlaybook, job_ids, run_playbook, slurm, wait_for

RUN = "batch-demo"
CAP = 48  # inference_max_new_tokens: the most tokens any prompt gets
BLOCK = 64  # the local inventory's model context (pretrain_model.block_size)
# what the training's inference stage and the batches share: the export job of one is the other's
RUN_VALUES = {"run_name": RUN, "inference_nodes": 3, "inference_evaluate": False}


@pytest.fixture(scope="module")
def trained(local_cluster):
    """A short training run of the local inventory's model (3 nodes x 2 ranks), exported by its inference stage."""
    shutil.rmtree(os.path.join(WORKSPACE, RUN), ignore_errors=True)
    shutil.rmtree(os.path.join(RUNS, RUN), ignore_errors=True)
    run_playbook("pretrain.yml", "-e", json.dumps(dict(RUN_VALUES, pretrain_steps=60, pretrain_checkpoint_interval=30,
                                                       inference_max_new_tokens=20)))
    return os.path.join(WORKSPACE, RUN)


def write_prompts(path, prompts):
    path.write_text("".join(json.dumps(p) + "\n" for p in prompts))
    return str(path)


def batch_values(prompts_file, **extra):
    values = dict(RUN_VALUES, inference_prompts_file=prompts_file, inference_max_new_tokens=CAP)
    values.update(extra)
    return values


def batch_dirs(run_dir):
    return set(glob.glob(os.path.join(run_dir, "batch", "*")))


def part_records(batch_dir):
    """Every whole record of the part files (a torn last line left out), and the torn lines."""
    records, torn = [], 0
    for path in glob.glob(os.path.join(batch_dir, "parts", "w*", "rank-*.jsonl")):
        with open(path, "rb") as handle:
            for line in handle:
                if line.endswith(b"\n"):
                    records.append(json.loads(line))
                else:
                    torn += 1
    return records, torn


def test_a_batch_over_three_nodes_comes_back_complete_in_order_and_a_rerun_submits_nothing(trained, tmp_path):
    long_prompt = "def f(x):\n    return x\n" * 20  # over the model's 64 tokens
    prompts = [{"prompt": "def f%d(" % i, "id": "p%d" % i} for i in range(18)]
    prompts[3].update(max_new_tokens=CAP + 100)  # capped
    prompts[4].update(prompt=long_prompt)  # left-truncated
    prompts[5].update(temperature=0, max_new_tokens=5)
    prompts[6] = {"prompt": "import os\n", "seed": 7, "top_k": 5}  # no id
    prompts_file = write_prompts(tmp_path / "prompts.jsonl", prompts)
    before_dirs = batch_dirs(trained)
    before = job_ids()
    ran = run_playbook("batch.yml", "-e", json.dumps(batch_values(prompts_file)))
    new = job_ids() - before
    assert len(new) == 1, new  # the batch: the training's inference stage exported the model

    local = os.path.join(RUNS, RUN)
    records = [json.loads(line) for line in open(os.path.join(local, "generations.jsonl"))]
    assert [r["index"] for r in records] == list(range(len(prompts)))
    assert [r["prompt"] for r in records] == [p["prompt"] for p in prompts]
    assert [r.get("id") for r in records] == [p.get("id") for p in prompts]
    # 6 ranks on the 3 nodes, prompt i on rank i mod 6
    assert [r["rank"] for r in records] == [i % 6 for i in range(len(prompts))]
    assert {r["world"] for r in records} == {6} and sorted({r["node"] for r in records}) == NODES
    assert all(isinstance(r["completion"], str) and r["tokens"] == r["max_new_tokens"] or r["finish"] == "end_of_text"
               for r in records)
    assert records[3]["capped"] is True and records[3]["max_new_tokens"] == CAP and records[3]["tokens"] == CAP
    assert not any(r["capped"] for i, r in enumerate(records) if i != 3)
    assert records[4]["truncated"] > 0 and records[4]["prompt_tokens"] == BLOCK
    assert records[5]["tokens"] == 5 and records[5]["temperature"] == 0
    assert records[6]["seed"] == 7 and records[6]["top_k"] == 5 and records[0]["seed"] == 1337

    summary = json.load(open(os.path.join(local, "summary.json")))
    assert summary["prompts"] == len(prompts) and summary["tokens"] == sum(r["tokens"] for r in records)
    assert summary["ranks"] == 6 and summary["tokens_per_second"] > 0 and summary["duplicates"] == 0
    assert re.search(r"Batch: %d prompts, %d tokens generated on 6 ranks in [\d.]+ s of the busiest rank: [\d.]+ tokens/s"
                     % (len(prompts), summary["tokens"]), ran.output), ran.output[-3000:]
    # no generated text on the terminal
    assert all(r["completion"][:24] not in ran.output for r in records if len(r["completion"].strip()) >= 24)
    # the batch's directory: named by its prompts, model and settings; the prompts copied there
    (batch_dir,) = batch_dirs(trained) - before_dirs
    with open(os.path.join(batch_dir, "prompts.jsonl")) as handle:
        assert handle.read() == open(prompts_file).read()

    # the same prompts again: the job's record says it ran, nothing is submitted
    before = job_ids()
    again = run_playbook("batch.yml", "-e", json.dumps(batch_values(prompts_file)))
    assert job_ids() - before == set()
    assert "Batch: %d prompts" % len(prompts) in again.output
    assert [json.loads(line) for line in open(os.path.join(local, "generations.jsonl"))] == records


def test_a_requeued_batch_job_generates_only_the_prompts_without_a_record(trained, tmp_path):
    # long enough that the job is requeued while it generates: 20 prompts a rank, 400 tokens each
    prompts = [{"prompt": "class C%d:\n" % i, "max_new_tokens": 400} for i in range(120)]
    prompts_file = write_prompts(tmp_path / "requeued.jsonl", prompts)
    before_dirs = batch_dirs(trained)
    playbook = BackgroundPlaybook(batch_values(prompts_file, inference_max_new_tokens=400), playbook="batch.yml")

    def some_records():
        dirs = batch_dirs(trained) - before_dirs
        if not dirs:
            return None
        records, _torn = part_records(next(iter(dirs)))
        return next(iter(dirs)) if len(records) >= 6 else None

    batch_dir = wait_for(some_records, 600, "the first records of the batch", playbook=playbook)
    job_id = slurm("squeue", "--noheader", "--name", "llmtrain-batch-" + RUN, "--format=%i").split()[0]
    slurm("scontrol", "requeue", job_id)
    seen_at_requeue = len(part_records(batch_dir)[0])
    assert seen_at_requeue < len(prompts)  # it was still generating
    result = playbook.wait(900)
    assert result.rc == 0, result.output[-4000:]

    records, _torn = part_records(batch_dir)
    counts = {}
    for record in records:
        counts[record["index"]] = counts.get(record["index"], 0) + 1
    # every prompt made once: none made again after the requeue
    assert counts == dict((i, 1) for i in range(len(prompts))), counts
    generated = [json.loads(line) for line in open(os.path.join(RUNS, RUN, "generations.jsonl"))]
    assert [r["index"] for r in generated] == list(range(len(prompts)))
    # the log of the job: two starts, the second one generating only what the first left
    (log,) = glob.glob(os.path.join(trained, "logs", "llmtrain-batch-%s-%s.out" % (RUN, job_id)))
    text = open(log, errors="replace").read()
    starts = re.findall(r"batch: rank (\d+) of 6: (\d+) of (\d+) prompts to generate", text)
    assert len(starts) == 12, starts
    first, second = starts[:6], starts[6:]
    assert sum(int(n) for _r, n, _t in first) == len(prompts)
    assert sum(int(n) for _r, n, _t in second) <= len(prompts) - seen_at_requeue
    assert json.load(open(os.path.join(RUNS, RUN, "summary.json")))["duplicates"] == 0


def test_a_bad_prompts_file_stops_the_play_before_anything_is_submitted(trained, tmp_path):
    prompts_file = tmp_path / "bad.jsonl"
    prompts_file.write_text('{"prompt": "def "}\n{"prompt": "x", "max_tokens": 5}\nnot json\n')
    before = job_ids()
    failed = run_playbook("batch.yml", "-e", json.dumps(batch_values(str(prompts_file))), check=False)
    assert failed.rc != 0
    assert 'inference_prompts_file=%s line 2: unknown key "max_tokens" (did you mean max_new_tokens?)' % prompts_file \
        in failed.output, failed.output[-3000:]
    assert "inference_prompts_file=%s line 3: it is not JSON" % prompts_file in failed.output
    assert job_ids() - before == set()
