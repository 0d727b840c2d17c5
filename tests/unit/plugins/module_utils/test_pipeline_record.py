# -*- coding: utf-8 -*-
"""pipeline_record: a rerun stops at a finished pipeline only when nothing it is made from changed."""

from __future__ import annotations

import json

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import pipeline_record
STAGES = ["data/prepare.done.json", "train.done.json", "generate.done.json", "deployed.json"]
VALUES = {"slurm_nodes": 3, "pretrain_steps": 200, "pretrain_model": {"n_layer": 2}, "nccl_env_socket_ifname": "eth0",
          "slurm_secret_env": {"WANDB_API_KEY": "secret"}, "ansible_host": "login1"}


def read(pipeline=None, **stages):
    """What read_files returns for pipeline.json and the stage records: stages given by their
    file name with _ for / and ., None or missing for a missing one, an Exception for an error."""
    files, missing, errors = {}, [], {}
    texts = dict((name, stages.get(name.replace("/", "_").replace(".", "_"))) for name in STAGES)
    texts["pipeline.json"] = pipeline
    for name, text in texts.items():
        if isinstance(text, Exception):
            errors[name] = str(text)
        elif text is None:
            missing.append(name)
        else:
            files[name] = text
    return {"files": files, "missing": missing, "errors": errors}


DONE = dict(data_prepare_done_json='{"job_id": 1}\n', train_done_json='{"job_id": 2}\n',
            generate_done_json='{"job_id": 3}\n')


def finished(values=None, workers=None, source=None, **stages):
    """A run directory as a full pipeline leaves it: the stage records and pipeline.json."""
    fingerprint = pipeline_record.fingerprint(values or VALUES, workers or {}, source)
    record = pipeline_record.record_text(fingerprint, read(**stages))
    return fingerprint, record


def test_the_same_inputs_and_records_are_finished():
    fingerprint, record = finished(**DONE)
    assert json.loads(record)["fingerprint"] == fingerprint
    assert pipeline_record.verdict(read(record, **DONE), fingerprint, []) == (True, "finished with these inputs")
    # the same inputs give the same text: a rerun that changed nothing writes nothing
    assert finished(**DONE)[1] == record


def test_any_run_variable_changed_is_not_finished():
    fingerprint, record = finished(**DONE)
    for name, value in (("pretrain_steps", 201), ("pretrain_model", {"n_layer": 3}), ("nccl_env_debug", "INFO"),
                        ("inference_prompts", ["def "]), ("deploy_dataset_max_bytes", 1)):
        changed = pipeline_record.fingerprint(dict(VALUES, **{name: value}), {}, None)
        assert changed != fingerprint, name
        verdict = pipeline_record.verdict(read(record, **DONE), changed, [])
        assert verdict == (False, "the inputs differ from those of the finished pipeline"), name


def test_other_variables_and_secrets_do_not_enter_the_fingerprint():
    fingerprint = pipeline_record.fingerprint(VALUES, {}, None)
    assert pipeline_record.fingerprint(dict(VALUES, ansible_host="login2"), {}, None) == fingerprint
    secret = dict(VALUES, slurm_secret_env={"WANDB_API_KEY": "another"})
    assert pipeline_record.fingerprint(secret, {}, None) == fingerprint
    # the way to the cluster: a login shell's PATH of another day is the same run
    path = dict(VALUES, slurm_client_env={"PATH": "/opt/slurm/bin:/usr/bin", "SLURM_CONF": "/etc/slurm/slurm.conf"})
    assert pipeline_record.fingerprint(path, {}, None) == fingerprint


def test_a_nodes_own_nccl_value_your_code_and_the_collection_count():
    base = pipeline_record.fingerprint(VALUES, {"n1": dict(VALUES)}, "abc")
    # a node whose value is the run's changes nothing; its own value does
    assert pipeline_record.fingerprint(VALUES, {"n1": dict(VALUES)}, "abc") == base
    assert pipeline_record.fingerprint(VALUES, {"n1": dict(VALUES, nccl_env_socket_ifname="ib0")}, "abc") != base
    assert pipeline_record.fingerprint(VALUES, {"n1": dict(VALUES), "n2": dict(VALUES)}, "abc") != base
    assert pipeline_record.fingerprint(VALUES, {"n1": dict(VALUES)}, "abd") != base  # your code changed


def test_the_collections_own_files_count(tmp_path):
    (tmp_path / "roles" / "deploy" / "files").mkdir(parents=True)
    template = tmp_path / "roles" / "deploy" / "files" / "train.py"
    template.write_text("print(1)\n")
    (tmp_path / "roles" / "__pycache__").mkdir()
    before = pipeline_record.collection_digest(str(tmp_path))
    other = tmp_path / "other"
    (other / "roles" / "deploy" / "files").mkdir(parents=True)
    (other / "roles" / "deploy" / "files" / "train.py").write_text("print(2)\n")
    assert pipeline_record.collection_digest(str(other)) != before
    assert pipeline_record.fingerprint(VALUES, {}, None, root=str(other)) != \
        pipeline_record.fingerprint(VALUES, {}, None, root=str(tmp_path))
    assert len(pipeline_record.collection_digest()) == 64  # this collection's own


def test_a_stage_that_ran_since_or_a_record_that_cannot_be_read_is_not_finished():
    fingerprint, record = finished(**DONE)
    again = {**DONE, "train_done_json": '{"job_id": 9}\n'}  # trained again (run_force, --tags pretrain)
    assert pipeline_record.verdict(read(record, **again), fingerprint, []) == \
        (False, "a stage ran again since the pipeline finished")
    gone = {**DONE, "generate_done_json": None}
    assert not pipeline_record.verdict(read(record, **gone), fingerprint, [])[0]
    unreadable = {**DONE, "train_done_json": OSError("a link, not followed")}
    assert not pipeline_record.verdict(read(record, **unreadable), fingerprint, [])[0]
    assert pipeline_record.record_text(fingerprint, read(**unreadable)) is None  # and none is written


def test_no_record_a_bad_one_or_a_controller_without_the_run_is_not_finished():
    fingerprint, record = finished(**DONE)
    cases = [(read(**DONE), [], "no pipeline.json: the pipeline has not finished with these inputs"),
             (read("{not json", **DONE), [], "pipeline.json cannot be read (it is no JSON (Expecting property name "
                                             "enclosed in double quotes: line 1 column 2 (char 1)))"),
             (read(OSError("a link, not followed"), **DONE), [], "pipeline.json cannot be read (a link, not followed)"),
             (read("[1]", **DONE), [], "the inputs differ from those of the finished pipeline"),
             (read(record, **DONE), ["runs/x/report.md"], "this controller lacks runs/x/report.md")]
    for result, missing, why in cases:
        assert pipeline_record.verdict(result, fingerprint, missing) == (False, why)
