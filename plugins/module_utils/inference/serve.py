# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The served model (playbooks/serve.yml) as the login node sees it: the endpoint file its job
wrote (read bounded, this user's own, a link not followed, each field of its type), whether the
server answers there, and what the play writes (runs/<run>/serve.json) and says."""

from __future__ import annotations

import errno
import http.client
import ipaddress
import os
import shlex
import stat

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted

ENDPOINT_MAX_BYTES = 65536
ENDPOINT_FIELDS = dict(job_id=untrusted.JOB, node=untrusted.TEXT, address=untrusted.TEXT, port=untrusted.COUNT,
                       backend=untrusted.TEXT, model=untrusted.TEXT, started=untrusted.TEXT,
                       ready=untrusted.TEXT)
BACKENDS = {"vllm": "vLLM (vllm serve)", "transformers": "transformers serve, behind the job's gate"}
# what an IP address may hold to go into a URL and a shell word as it is
HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:[]")


def read_endpoint(path, job_id, uid=None):
    """(the endpoint record of job job_id, None), (None, why it cannot be used) or (None, None)
    while there is none of that job. The file must be a regular file of this user (uid), not a
    link, at most ENDPOINT_MAX_BYTES; the address an IP address, the port 1-65535."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ENOENT:
            return None, None
        return None, "a link, not followed" if err.errno == errno.ELOOP else (err.strerror or str(err)).lower()
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "not a regular file"
        if info.st_uid != (os.getuid() if uid is None else uid):
            return None, "owned by uid %d, not by this user: someone else wrote it" % info.st_uid
        data = handle.read(ENDPOINT_MAX_BYTES + 1)
    record = untrusted.record(data, ENDPOINT_MAX_BYTES)
    if record is None:
        return None, "no JSON object of at most %d bytes" % ENDPOINT_MAX_BYTES
    endpoint = untrusted.fields(record, ENDPOINT_FIELDS)
    endpoint["api_key"] = record.get("api_key") is True
    if endpoint.get("job_id") != str(job_id):
        return None, None  # an earlier job's file: this job has not written its own yet
    address = endpoint.get("address", "")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        address = None
    # an IPv6 scope id (fe80::1%eth0) may hold any character: the address goes into a URL and a shell command
    if not address or not set(address) <= HOST_CHARS:
        return None, "its address %r is no IP address without a scope" % untrusted.printable(str(record.get("address")))[:60]
    if not 0 < endpoint.get("port", 0) < 65536:
        return None, "its port %r is no TCP port" % untrusted.printable(str(record.get("port")))[:20]
    missing = [name for name in ("node", "backend", "model") if not endpoint.get(name)]
    if missing:
        return None, "it lacks %s" % ", ".join(missing)
    return endpoint, None


def probe(address, port, key, timeout=5.0):
    """The HTTP status of GET /v1/models at address:port (with the key as a bearer token when one
    is given), or None when nothing answers."""
    connection = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        connection.request("GET", "/v1/models", headers={"Authorization": "Bearer " + key} if key else {})
        answer = connection.getresponse()
        answer.read(1048576)
        return answer.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def host_url(address):
    return "[%s]" % address if ":" in address else address


def tunnel(endpoint, login_host, login_user=None):
    """The ssh command a user runs on a laptop to reach the server through the login node."""
    target = "%s@%s" % (login_user, login_host) if login_user else login_host
    forward = "%d:%s:%d" % (endpoint["port"], host_url(endpoint["address"]), endpoint["port"])
    return "ssh -N -L %s %s" % (shlex.quote(forward), shlex.quote(target))


def serve_record(endpoint, login_host, login_user=None, key_name=None, time_limit=None):
    """What runs/<run>/serve.json holds: where the server is and how to reach it; the name of the
    key's variable, never the key."""
    url = "http://%s:%d/v1" % (host_url(endpoint["address"]), endpoint["port"])
    return dict(url=url, model=endpoint["model"], job_id=endpoint["job_id"], node=endpoint["node"],
                address=endpoint["address"], port=endpoint["port"], backend=endpoint["backend"],
                api_key_variable=key_name if endpoint.get("api_key") else None,
                tunnel=tunnel(endpoint, login_host, login_user),
                tunnel_url="http://localhost:%d/v1" % endpoint["port"],
                started=endpoint.get("started"), time_limit=time_limit)


def summary(record, run_name, serve_file, attached):
    """The lines the play prints once the server answers."""
    p = dict((k, untrusted.printable(v) if isinstance(v, str) else v) for k, v in record.items())
    lines = ["Run %s's model %s is served at %s by %s, job %s on %s%s." % (
        run_name, p["model"], p["url"], BACKENDS.get(p["backend"], p["backend"]), p["job_id"], p["node"],
        " (already running: re-attached)" if attached else "")]
    if p["api_key_variable"]:
        lines.append("It asks for the API key in slurm_secret_env's %s: send it as the bearer token "
                     "(OPENAI_API_KEY, or api_key= of the openai client)." % p["api_key_variable"])
    else:
        lines.append("No API key is set (slurm_secret_env's LLMTRAIN_SERVE_API_KEY): anyone who can reach "
                     "%s:%d can use it." % (p["address"], p["port"]))
    lines += ["From your laptop: %s" % p["tunnel"],
              "  then use %s (model %s)." % (p["tunnel_url"], p["model"]),
              "It runs until its time limit (%s) or until playbooks/serve.yml -e run_name=%s -e serve_state=absent "
              "stops it; this is in %s." % (p["time_limit"] or "inference_serve_time_limit", run_name, serve_file)]
    return lines


def ended_message(job, run_name, log_lines, waited=None):
    """Why there is no server: its job ended (or did not start, or did not answer, within waited
    seconds), with the end of its log as it was written, made safe to print."""
    state = job.get("state") or "UNKNOWN"
    if waited is None:
        head = "Serving job %s of run %s ended %s before its server answered (exit code %s%s)." % (
            job.get("job_id"), run_name, state, job.get("exit_code"),
            ", reason: %s" % job["reason"] if job.get("reason") else "")
    elif state == "PENDING":
        head = ("Serving job %s of run %s has waited %d s in the queue (reason: %s) and is still queued: "
                "playbooks/serve.yml -e run_name=%s re-attaches to it once it runs (or raise "
                "inference_serve_ready_timeout)." % (job.get("job_id"), run_name, waited, job.get("reason"), run_name))
    else:
        head = ("Serving job %s of run %s is %s, and its server has not answered within %d s "
                "(inference_serve_ready_timeout): it still runs; run playbooks/serve.yml -e run_name=%s again to "
                "wait on, or stop it with -e serve_state=absent." % (job.get("job_id"), run_name, state, waited,
                                                                     run_name))
    lines = [head]
    if log_lines:
        lines.append("The last lines of its log (%s):" % untrusted.printable(job.get("stdout_path") or "?"))
        lines += ["  " + untrusted.printable(line) for line in log_lines]
    return "\n".join(lines)


def refused_message(job_id, run_name, endpoint, key_set):
    """The server answers, but not to the key this play has: it was started with another one."""
    return ("The server of job %s (run %s) at %s:%d refuses %s: it was started with %s. Stop it "
            "(playbooks/serve.yml -e run_name=%s -e serve_state=absent) and start it again, so that it asks for "
            "slurm_secret_env's LLMTRAIN_SERVE_API_KEY as it is now." % (
                job_id, run_name, endpoint["address"], endpoint["port"],
                "this play's key (slurm_secret_env's LLMTRAIN_SERVE_API_KEY)" if key_set else "a request without a key",
                "another key" if key_set else "a key (LLMTRAIN_SERVE_API_KEY), which slurm_secret_env no longer sets",
                run_name))
