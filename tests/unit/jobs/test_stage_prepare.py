"""The data preparation job (jobs/prepare.py): its script for every inventory, and one with a BPE
tokenizer, a byte limit and several inputs, against the golden files; what a user checks of it (the
options, the venv job it waits behind); and an input path that holds a line break, which runs as
one quoted word."""

import json
import os
import subprocess
import sys

import pytest
import yaml

import golden
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.prepare import Prepare
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.venv import Venv

STAGE = "prepare"
# a BPE of its own vocabulary, trained on a part of two inputs (one named in a nested list)
BPE = dict(golden.REQUIRED, deploy_tokenizer="bpe", deploy_vocab_size=4096, deploy_dataset_max_bytes=1000000,
           run_dataset=["/data/web text.txt", ["/data/books"]])


@pytest.fixture
def bpe_case(monkeypatch):
    monkeypatch.setitem(golden.CASES, "bpe", BPE)
    return golden.job(Prepare, "bpe")


@pytest.mark.parametrize("case", sorted(golden.CASES))
def test_the_prepare_job_script_is_the_kept_one(case):
    golden.check(STAGE, case, golden.kept(golden.job(Prepare, case)))


def test_the_prepare_job_script_with_a_bpe_and_a_byte_limit_is_the_kept_one(bpe_case):
    golden.check(STAGE, "bpe", golden.kept(bpe_case))


def test_no_golden_file_is_left_without_its_case():
    assert not golden.stale(STAGE, list(golden.CASES) + ["bpe"])


def test_the_tokenizer_and_the_byte_limit_are_given_only_when_set(bpe_case):
    script = bpe_case.script()
    assert ("--input '/data/web text.txt' /data/books \\\n    --max-bytes 1000000 \\\n    --tokenizer bpe \\\n"
            "    --vocab-size 4096 || exit $?") in script
    ours = golden.job(Prepare, "ours").script()
    assert "--input stdlib || exit $?" in ours
    assert not any(option in ours for option in ("--max-bytes", "--tokenizer", "--vocab-size"))
    values = dict(golden.variables("ours"), deploy_tokenizer="/shared/tok/tokenizer.json")
    assert "--tokenizer /shared/tok/tokenizer.json || exit $?" in Prepare(values).script()


def test_the_options_are_one_cpu_requeued_with_what_the_site_requires():
    site = golden.job(Prepare, "site-options").module_args()
    assert site["name"] == "llmtrain-prepare-golden-site-options" and site["chdir"] == "/shared/llm work/golden-site-options"
    assert dict((k, site["options"][k]) for k in ("nodes", "ntasks", "cpus-per-task", "mem", "time", "requeue")) == {
        "nodes": 1, "ntasks": 1, "cpus-per-task": 1, "mem": "2G", "time": "00:30:00", "requeue": True}
    assert dict((k, site["options"][k]) for k in ("account", "qos", "reservation", "constraint", "exclusive", "licenses")) == {
        "account": "proj-42", "qos": "high", "reservation": "maint_window", "constraint": "a100&ib", "exclusive": True,
        "licenses": "scratch:1"}
    assert site["exclude"] == ["n7"] and site["bad_nodes_file"] == "/shared/llm work/golden-site-options/bad_nodes.json"
    assert site["done_file"] == "/shared/llm work/golden-site-options/data/prepare.done.json"
    assert "never in a script" not in site["content"]


def test_it_waits_behind_the_record_of_the_venv_job_only_when_the_venv_is_made():
    assert golden.job(Prepare, "ours").module_args()["after_records"] == []
    values = dict(golden.variables("ours"), deploy_venv_create=True, slurm_python="/shared/venvs/llm/bin/python")
    assert Prepare(values).module_args()["after_records"] == [Venv(values).done_file] == ["/shared/venvs/llm/.llmtrain-venv.json"]


def test_a_fact_is_refused():
    with pytest.raises(ValueError, match="the prepare job takes no fact checkpoint .*takes: none"):
        Prepare(golden.variables("ours"), {"checkpoint": "step_000050.pt"})


def test_the_task_gives_nothing_the_job_sets():
    with open(os.path.join(golden.ROOT, "roles", "deploy", "tasks", "main.yml")) as handle:
        task = [t for t in yaml.safe_load(handle) if t.get("llmtrain.slurm.sbatch", {}).get("stage") == STAGE]
    assert len(task) == 1
    assert not set(task[0]["llmtrain.slurm.sbatch"]) & set(golden.job(Prepare, "ours").module_args())


INJECTED = "/data/a\ntouch INJECTED\n#"


def test_an_input_with_a_line_break_runs_as_one_word(tmp_path):
    python = tmp_path / "python"
    python.write_text("#!%s\nimport json, os, sys\nopen(os.environ['ARGS_FILE'], 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n" % sys.executable)
    python.chmod(0o755)
    values = dict(golden.variables("ours"), slurm_workspace=str(tmp_path / "llm work"), slurm_python=str(python),
                  run_dataset=[INJECTED, "/data/b"])
    run_dir = tmp_path / "llm work" / "golden-ours"
    (run_dir / "scripts").mkdir(parents=True)
    (run_dir / "scripts" / "node_check.sh").write_text("exit 0\n")
    env = dict(os.environ, SLURM_JOB_ID="7", ARGS_FILE=str(tmp_path / "args"))
    proc = subprocess.run(["bash", "-c", Prepare(values).script()], cwd=str(run_dir), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout
    assert not list(tmp_path.rglob("INJECTED")), proc.stdout
    prepare, job_end = [json.loads(line) for line in (tmp_path / "args").read_text().splitlines()]
    assert prepare == ["-m", "trainer.prepare", "--out", str(run_dir / "data"), "--input", INJECTED, "/data/b"]
    assert job_end[:2] == ["-m", "llmtrain_node.job_end"]
