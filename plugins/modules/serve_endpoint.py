#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: serve_endpoint
short_description: Wait until a serving job's OpenAI-compatible server answers, and say where it is
description:
  - Waits, once per O(poll_interval) for up to O(wait_timeout) seconds, until the job O(job_id) runs, has
    written O(endpoint_file) (its address, port, backend and model) and its server answers
    C(GET /v1/models) at that address from the login node, with O(api_key) as a bearer token when it is set.
  - O(endpoint_file) is read bounded (64 KiB), without following a link, and only when this user owns it; a
    file of an earlier job (another job id) is waited past. Its address must be an IP address, its port a TCP
    port.
  - Fails, with the last O(log_tail_lines) lines of the job's log made safe for a terminal, when the job
    ends before its server answers; when the server refuses the key (it was started with another one); and
    when O(wait_timeout) passes, saying whether the job still waits in the queue. The job is never cancelled.
  - Returns RV(serve), what C(runs/<run>/serve.json) holds - the base URL, the model, the job, the node,
    the backend, the name of the key's variable (never the key) and the ssh tunnel through O(login_host) -
    and RV(lines), what the play prints.
version_added: 0.3.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
extends_documentation_fragment:
  - llmtrain.slurm.slurm
  - llmtrain.slurm.slurm.unreachable
  - llmtrain.slurm.slurm.wait
options:
  job_id:
    description: The serving job, as M(llmtrain.slurm.sbatch) returned it.
    type: str
    required: true
  endpoint_file:
    description: The file the job writes once its server answers on the node (C(<run>/serve/endpoint.json)).
    type: path
    required: true
  api_key:
    description: "The API key the server asks for, if any: sent as C(Authorization: Bearer KEY), never returned."
    type: str
    default: ""
  api_key_name:
    description: The name of the variable of C(slurm_secret_env) that holds the key, for RV(serve).
    type: str
    default: LLMTRAIN_SERVE_API_KEY
  login_host:
    description: The login node as a user's ssh reaches it, for the tunnel.
    type: str
    required: true
  login_user:
    description: The user ssh logs in as on O(login_host), when it is not the laptop's own.
    type: str
  run_name:
    description: The run, for the messages.
    type: str
    required: true
  serve_file:
    description: Where the play writes RV(serve) on the controller, for the messages.
    type: str
    default: serve.json
  attached:
    description: Whether the job was found running rather than submitted, for the messages.
    type: bool
    default: false
  wait_timeout:
    description: Seconds to wait for the server before failing.
    type: float
    default: 900
  log_tail_lines:
    description: Lines of the job's log to show when it ended or did not answer.
    type: int
    default: 30
notes:
  - Supports check mode (it only reads and asks).
"""

EXAMPLES = r"""
- name: Wait for the server of the serving job, then say where it is
  llmtrain.slurm.serve_endpoint:
    job_id: "{{ serve_job.job_id }}"
    endpoint_file: /shared/runs/tiny/serve/endpoint.json
    api_key: "{{ slurm_secret_env.LLMTRAIN_SERVE_API_KEY | default('') }}"
    login_host: login1.cluster.example
    run_name: tiny
    wait_timeout: 900
  register: served

- name: Print the URL and the tunnel
  ansible.builtin.debug:
    msg: "{{ served.lines }}"
"""

RETURN = r"""
endpoint:
  description: What the job wrote of its server - C(job_id), C(node), C(address), C(port), C(backend), C(model),
    C(api_key) (whether it asks for one), C(started), C(ready).
  returned: success
  type: dict
  sample: {"job_id": "42", "node": "gpu-01", "address": "10.1.0.11", "port": 41877, "backend": "vllm",
           "model": "tiny", "api_key": true, "started": "2026-12-05T10:00:00", "ready": "2026-12-05T10:00:40"}
serve:
  description: What C(runs/<run>/serve.json) holds.
  returned: success
  type: dict
  sample: {"url": "http://10.1.0.11:41877/v1", "model": "tiny", "job_id": "42", "node": "gpu-01",
           "address": "10.1.0.11", "port": 41877, "backend": "vllm", "api_key_variable": "LLMTRAIN_SERVE_API_KEY",
           "tunnel": "ssh -N -L 41877:10.1.0.11:41877 login1.cluster.example",
           "tunnel_url": "http://localhost:41877/v1", "started": "2026-12-05T10:00:00", "time_limit": "04:00:00"}
lines:
  description: Where the server is, how to reach it and stop it, as the play prints it.
  returned: success
  type: list
  elements: str
waited:
  description: Seconds waited.
  returned: always
  type: float
"""

import time

from ansible_collections.llmtrain.slurm.plugins.module_utils.inference import serve
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.job_log import output_tail
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_module import SlurmModule
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import ACTIVE_STATES
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.waiter import Waiter


def wait_for_server(m):
    p = m.params
    began = time.monotonic()
    seen = {}

    def check():
        job = m.client.show_job(p["job_id"])
        seen.update(job=job, endpoint=None, status=None, why=None)
        if job["state"] != "RUNNING":
            return seen
        endpoint, why = serve.read_endpoint(p["endpoint_file"], p["job_id"])
        seen.update(endpoint=endpoint, why=why)
        if endpoint:
            seen["status"] = serve.probe(endpoint["address"], endpoint["port"], p["api_key"])
        return seen

    def done(value):
        # 5xx: not ready yet (the gate's 502 before its server answers, vLLM's 503 while it loads)
        return not value["job"]["active"] or value["why"] is not None or (value["status"] or 500) < 500

    value, _finished = Waiter(p["poll_interval"], p["unreachable_timeout"]).wait(check, done, p["wait_timeout"])
    waited = round(time.monotonic() - began, 1)
    m.result["waited"] = waited
    job, endpoint = value["job"], value["endpoint"]
    if value["why"]:
        m.fail("%s cannot be used: %s. Nothing of it is trusted; stop the job (playbooks/serve.yml -e run_name=%s "
               "-e serve_state=absent) and look at who writes there." % (p["endpoint_file"], value["why"], p["run_name"]))
    if value["status"] in (401, 403):
        m.fail(serve.refused_message(p["job_id"], p["run_name"], endpoint, bool(p["api_key"])))
    if value["status"] == 200:
        record = serve.serve_record(endpoint, p["login_host"], p["login_user"], p["api_key_name"], job.get("time_limit"))
        lines = serve.summary(record, p["run_name"], p["serve_file"], p["attached"])
        return dict(changed=False, endpoint=endpoint, serve=record, lines=lines, waited=waited)
    if value["status"] is not None:
        m.fail("The server of job %s at %s:%d answers /v1/models with HTTP %d: its log (%s) says why." % (
            p["job_id"], endpoint["address"], endpoint["port"], value["status"], job.get("stdout_path")))
    tail = output_tail(job, p["log_tail_lines"])
    if job["state"] in ACTIVE_STATES:
        m.fail(serve.ended_message(job, p["run_name"], tail, waited=waited), job=job)
    m.fail(serve.ended_message(job, p["run_name"], tail), job=job)
    return None


def main():
    SlurmModule(
        dict(
            job_id=dict(type="str", required=True),
            endpoint_file=dict(type="path", required=True),
            api_key=dict(type="str", default="", no_log=True),
            api_key_name=dict(type="str", default="LLMTRAIN_SERVE_API_KEY", no_log=False),
            login_host=dict(type="str", required=True),
            login_user=dict(type="str"),
            run_name=dict(type="str", required=True),
            serve_file=dict(type="str", default="serve.json"),
            attached=dict(type="bool", default=False),
            log_tail_lines=dict(type="int", default=30),
        ),
        wait=900,
        supports_check_mode=True,
    ).run(wait_for_server)


if __name__ == "__main__":
    main()
