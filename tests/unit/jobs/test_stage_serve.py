"""The serving job (jobs/serve.py): its script for every inventory, and one with the server's own
arguments and port, against the golden files; what a user checks of it (the GPUs it asks for, what
the site requires); and that the role's task, and the tasks that find the job again, agree with it.
tests/unit/test_inference_scripts.py runs its script under bash."""

import os

import jinja2
import pytest
import yaml

import golden
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.serve import KEY_NAME, Serve

STAGE = "serve"
# the model directory the play chose: the newest checkpoint's export, or your script's checkpoint as it is
FACTS = dict((case, {"model_dir": "/shared/llm work/golden-%s/%s" % (
    case, "checkpoints/checkpoint-50" if case == "own-script" else "export/step_000050")}) for case in golden.CASES)
# the server's own arguments (one a shell would take for a command) on a port of your choice
SERVE_ARGS = dict(golden.REQUIRED, slurm_gpus_per_node=4, inference_serve_gpus=2, inference_serve_port=8000,
                  inference_serve_args=["--max-model-len", "4096", "$(touch x)", "it's"])
ROLE = os.path.join(golden.ROOT, "roles", "inference")


@pytest.fixture
def serve_args_case(monkeypatch):
    monkeypatch.setitem(golden.CASES, "serve-args", SERVE_ARGS)
    return golden.job(Serve, "serve-args", {"model_dir": "/models/best"})


@pytest.mark.parametrize("case", sorted(golden.CASES))
def test_the_serve_job_script_is_the_kept_one(case):
    golden.check(STAGE, case, golden.kept(golden.job(Serve, case, FACTS[case])))


def test_the_serve_job_script_with_the_servers_arguments_and_port_is_the_kept_one(serve_args_case):
    golden.check(STAGE, "serve-args", golden.kept(serve_args_case))


def test_no_golden_file_is_left_without_its_case():
    assert not golden.stale(STAGE, list(golden.CASES) + ["serve-args"])


def test_it_asks_for_one_gpu_where_the_nodes_have_them_none_on_cpu_nodes_or_inference_serve_gpus():
    gpus = golden.job(Serve, "gpus", FACTS["gpus"]).options()
    assert gpus["gpus-per-node"] == "h100:1" and gpus["nodes"] == 1 and gpus["ntasks"] == 1 and gpus["cpus-per-task"] == 64
    assert "--gpus 1 --require-torch" in golden.job(Serve, "gpus", FACTS["gpus"]).script()
    cpu = golden.job(Serve, "ours", FACTS["ours"]).options()
    assert not any(name in cpu for name in ("gres", "gpus-per-node"))


def test_inference_serve_gpus_is_what_it_asks_for_and_what_its_server_gets(serve_args_case):
    assert serve_args_case.options()["gres"] == "gpu:2"
    assert "--port 8000 --gpus 2 --key-env LLMTRAIN_SERVE_API_KEY -- --max-model-len 4096 '$(touch x)' 'it'\"'\"'s'" \
        in serve_args_case.script()


def test_the_options_carry_what_the_site_requires_and_the_script_is_kept():
    site = golden.job(Serve, "site-options", FACTS["site-options"]).module_args()
    assert dict((k, site["options"][k]) for k in ("account", "qos", "reservation", "constraint", "exclusive", "licenses")) == {
        "account": "proj-42", "qos": "high", "reservation": "maint_window", "constraint": "a100&ib", "exclusive": True,
        "licenses": "scratch:1"}
    assert site["exclude"] == ["n7"] and site["bad_nodes_file"] == "/shared/llm work/golden-site-options/bad_nodes.json"
    assert site["keep_script"] == "/shared/llm work/golden-site-options/scripts/serve.sbatch"
    assert "never in a script" not in site["content"] and KEY_NAME in site["content"]


def test_a_fact_it_does_not_take_is_refused_naming_what_it_takes():
    with pytest.raises(ValueError, match="takes no fact checkpoint .*takes: model_dir"):
        Serve(golden.variables("ours"), {"model_dir": "/m", "checkpoint": "step_000050.pt"})


def test_the_role_names_the_job_and_its_key_as_the_class_does():
    """serve_stop.yml cancels the job by the role's name for it, and serve_endpoint reads the key by the role's name."""
    with open(os.path.join(ROLE, "vars", "main.yml")) as handle:
        role_vars = yaml.safe_load(handle)
    job = golden.job(Serve, "ours", FACTS["ours"])
    assert jinja2.Template(role_vars["_inference_serve_job_name"]).render(run_name=job.run.name) == job.name
    assert role_vars["_inference_serve_key_name"] == KEY_NAME


def test_the_task_gives_the_facts_the_job_takes_and_nothing_the_job_sets():
    with open(os.path.join(ROLE, "tasks", "serve.yml")) as handle:
        tasks = yaml.safe_load(handle)
    tasks += [t for block in tasks for t in block.get("block", [])]
    task = [t for t in tasks if t.get("llmtrain.slurm.sbatch", {}).get("stage") == STAGE]
    assert len(task) == 1
    args = task[0]["llmtrain.slurm.sbatch"]
    assert sorted(args["facts"]) == sorted(Serve.facts)
    assert not set(args) & set(golden.job(Serve, "ours", FACTS["ours"]).module_args())
