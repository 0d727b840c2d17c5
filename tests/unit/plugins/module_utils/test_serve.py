"""What the login node makes of a serving job: its endpoint file (read bounded, this user's, no link,
this job's), runs/<run>/serve.json with the tunnel, and what the play prints."""

import json
import os

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.inference import serve

ENDPOINT = {"job_id": "42", "node": "gpu-01", "address": "10.1.0.11", "port": 41877, "backend": "transformers",
            "model": "tiny", "api_key": True, "started": "2026-12-05T10:00:00", "ready": "2026-12-05T10:00:20"}


def written(tmp_path, record, name="endpoint.json"):
    path = tmp_path / name
    path.write_text(record if isinstance(record, str) else json.dumps(record))
    return str(path)


def test_the_endpoint_of_this_job_is_read_with_each_field_typed(tmp_path):
    endpoint, why = serve.read_endpoint(written(tmp_path, ENDPOINT), "42")
    assert why is None and endpoint == ENDPOINT


@pytest.mark.parametrize("record, why", [
    (dict(ENDPOINT, address="node1; rm -rf /"), "is no IP address"),
    # a scope id may hold anything: it would reach the URL and the tunnel's shell command
    (dict(ENDPOINT, address="fe80::1%$(id>&2);echo"), "is no IP address without a scope"),
    (dict(ENDPOINT, address="fe80::1%eth0"), "is no IP address without a scope"),
    (dict(ENDPOINT, port=70000), "is no TCP port"),
    (dict(ENDPOINT, port="41877"), "is no TCP port"),
    (dict(ENDPOINT, model=""), "it lacks model"),
    ("[1, 2]", "no JSON object"),
    ("x" * 70000, "no JSON object of at most 65536 bytes"),
])
def test_an_endpoint_file_that_cannot_be_used_says_why(tmp_path, record, why):
    endpoint, reason = serve.read_endpoint(written(tmp_path, record), "42")
    assert endpoint is None and why in reason


def test_an_earlier_jobs_file_or_none_is_waited_past(tmp_path):
    assert serve.read_endpoint(written(tmp_path, dict(ENDPOINT, job_id="41")), "42") == (None, None)
    assert serve.read_endpoint(str(tmp_path / "missing.json"), "42") == (None, None)


def test_a_link_or_another_users_file_is_not_trusted(tmp_path):
    target = written(tmp_path, ENDPOINT, "elsewhere.json")
    os.symlink(target, str(tmp_path / "endpoint.json"))
    assert serve.read_endpoint(str(tmp_path / "endpoint.json"), "42") == (None, "a link, not followed")
    endpoint, why = serve.read_endpoint(target, "42", uid=os.getuid() + 1)
    assert endpoint is None and "not by this user" in why


def test_serve_json_names_the_keys_variable_never_the_key_and_the_tunnel_through_the_login_node():
    record = serve.serve_record(ENDPOINT, "login1.example", None, "LLMTRAIN_SERVE_API_KEY", "04:00:00")
    assert record == dict(url="http://10.1.0.11:41877/v1", model="tiny", job_id="42", node="gpu-01",
                          address="10.1.0.11", port=41877, backend="transformers",
                          api_key_variable="LLMTRAIN_SERVE_API_KEY",
                          tunnel="ssh -N -L 41877:10.1.0.11:41877 login1.example",
                          tunnel_url="http://localhost:41877/v1", started="2026-12-05T10:00:00", time_limit="04:00:00")
    keyless = serve.serve_record(dict(ENDPOINT, api_key=False, address="fd00::5"), "login1", "al ice", "K", None)
    assert keyless["api_key_variable"] is None and keyless["url"] == "http://[fd00::5]:41877/v1"
    assert keyless["tunnel"] == "ssh -N -L '41877:[fd00::5]:41877' 'al ice@login1'"


def test_what_the_play_prints_says_who_can_use_it_how_to_reach_it_and_how_to_stop_it():
    record = serve.serve_record(dict(ENDPOINT, api_key=False), "login1", None, "LLMTRAIN_SERVE_API_KEY", "04:00:00")
    lines = serve.summary(record, "tiny", "runs/tiny/serve.json", attached=False)
    assert lines == [
        "Run tiny's model tiny is served at http://10.1.0.11:41877/v1 by transformers serve, behind the job's gate, "
        "job 42 on gpu-01.",
        "No API key is set (slurm_secret_env's LLMTRAIN_SERVE_API_KEY): anyone who can reach 10.1.0.11:41877 can use it.",
        "From your laptop: ssh -N -L 41877:10.1.0.11:41877 login1",
        "  then use http://localhost:41877/v1 (model tiny).",
        "It runs until its time limit (04:00:00) or until playbooks/serve.yml -e run_name=tiny -e serve_state=absent "
        "stops it; this is in runs/tiny/serve.json."]
    keyed = serve.summary(serve.serve_record(ENDPOINT, "login1", None, "LLMTRAIN_SERVE_API_KEY", None), "tiny", "f",
                          attached=True)
    assert keyed[0].endswith("job 42 on gpu-01 (already running: re-attached).")
    assert "API key in slurm_secret_env's LLMTRAIN_SERVE_API_KEY" in keyed[1]


def test_a_job_that_ended_is_told_with_its_log_made_safe_for_a_terminal():
    job = dict(job_id="42", state="FAILED", exit_code=1, reason="NonZeroExitCode", stdout_path="/r/logs/x-42.out")
    text = serve.ended_message(job, "tiny", ["OSError: no model\x1b]52;c;ZXZpbA==\x07", "bye"])
    assert text.split("\n") == [
        "Serving job 42 of run tiny ended FAILED before its server answered (exit code 1, reason: NonZeroExitCode).",
        "The last lines of its log (/r/logs/x-42.out):", "  OSError: no model", "  bye"]
    queued = serve.ended_message(dict(job, state="PENDING", reason="Resources"), "tiny", [], waited=900)
    assert "still queued" in queued and "re-attaches" in queued


def test_a_server_started_with_another_key_is_told_how_to_start_again():
    text = serve.refused_message("42", "tiny", ENDPOINT, key_set=False)
    assert "refuses a request without a key" in text and "-e run_name=tiny -e serve_state=absent" in text
