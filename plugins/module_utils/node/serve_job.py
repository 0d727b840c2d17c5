# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving job of playbooks/serve.yml, on its node, after its node check:

    python -m llmtrain_node.serve_job --serve-dir D --model-dir M --model NAME --endpoint-file F
        [--port P] [--gpus G] [--key-env VAR] [-- SERVER ARGS...]

- serves M as model NAME (a link NAME -> M in D, where the server runs) on the node's address (its
  name resolved, never a loopback one): with `vllm serve` where this Python has vLLM (the key, when
  VAR is set, reaches vLLM in VLLM_API_KEY only), else with `transformers serve` on the node's
  127.0.0.1 behind the gate (serve_gate.py), which asks for the key;
- a Python that has neither ends the job at once, saying what to install (SETTING);
- writes F (job id, node, address, port, backend, model, whether a key is asked for, started, ready)
  once /v1/models answers: the play waits for that file. The key is never written anywhere;
- ends the job as soon as the server or the gate ends (FAILED), and stops the server when Slurm
  stops the job (SIGTERM, SIGINT).

This file imports nothing outside Python's standard library: it runs on the batch node, beside the
run's other scripts, in slurm_python (inside the run's container, where one is set)."""

from __future__ import annotations

import argparse
import asyncio
import http.client
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time

from . import serve_gate
from .serve_gate import say
from .atomic import replace_file
from .exit_codes import FAILED, SETTING

# What each server needs to start, beside this Python: vllm serve; transformers serve (its serving
# extras: FastAPI on uvicorn, whose HTTP parser h11 is the gate's too).
NEEDS = {"vllm": ("vllm",), "transformers": ("transformers", "fastapi", "uvicorn", "h11")}
INSTALL = ("install vLLM (pip install vllm), or transformers with its serving extras "
           "(pip install 'transformers[serving]'), into slurm_python's environment (with deploy_venv: add it to "
           "deploy_venv_packages; in a container: into its image)")
# Seconds a stopped server gets to end before it is killed.
STOP_GRACE = 20


def backend_of(find_spec=importlib.util.find_spec):
    """('vllm' or 'transformers', None) for the server this Python can run, else (None, what is
    missing of each)."""
    missing = {}
    for backend, modules in NEEDS.items():
        missing[backend] = [name for name in modules if find_spec(name) is None]
        if not missing[backend]:
            return backend, None
    return None, missing


def server_command(backend, python, model, address, port, gpus, server_args):
    """The server's argv: never the key (ps and Slurm show a command line)."""
    if backend == "vllm":
        argv = [python, "-m", "vllm.entrypoints.cli.main", "serve", model, "--served-model-name", model,
                "--host", address, "--port", str(port)]
        if gpus > 1:
            argv += ["--tensor-parallel-size", str(gpus)]
    else:
        argv = [python, "-m", "transformers.cli.transformers", "serve", model, "--host", address, "--port", str(port)]
    return argv + list(server_args)


def server_environment(backend, environ, key_env, key):
    """The server's environment: the key's variable removed; for vLLM, which checks the key itself,
    the key as VLLM_API_KEY (a key set in it otherwise is removed too)."""
    env = dict((name, value) for name, value in environ.items() if name not in (key_env, "VLLM_API_KEY"))
    if backend == "vllm" and key:
        env["VLLM_API_KEY"] = key
    return env


def link_model(serve_dir, name, model_dir):
    """The model by its served name: serve_dir/name -> model_dir, replaced atomically."""
    temp = os.path.join(serve_dir, ".%s.link-%d" % (name, os.getpid()))
    if os.path.lexists(temp):
        os.unlink(temp)
    os.symlink(model_dir, temp)
    os.replace(temp, os.path.join(serve_dir, name))


def answers(address, port, key, timeout=5):
    """Whether http://address:port/v1/models answers 200 (with the key, when one is set)."""
    connection = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        connection.request("GET", "/v1/models", headers={"Authorization": "Bearer " + key} if key else {})
        answer = connection.getresponse()
        answer.read(1048576)
        return answer.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def endpoint_record(args, address, port, backend, started, now=None):
    """What the endpoint file holds: where the server listens, and whose it is; never the key."""
    return {"job_id": args.job_id, "node": args.node, "address": address, "port": port, "backend": backend,
            "model": args.model, "api_key": bool(args.key), "started": started,
            "ready": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))}


def announce_when_ready(args, address, port, backend, stop, check=answers, clock=time.monotonic):
    """Waits until the server answers on (address, port), then writes the endpoint file; gives up
    when stop is set (the job ends)."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    began = clock()
    while not check(address, port, args.key):
        if stop.wait(0.5):
            return False
    replace_file(args.endpoint_file, (json.dumps(endpoint_record(args, address, port, backend, started),
                                                 sort_keys=True) + "\n").encode("utf-8"), prefix=".endpoint.")
    say("%s serves %s on http://%s:%d/v1 (ready after %.1f s)%s" % (
        backend, args.model, address, port, clock() - began,
        "" if args.key else "; no API key is set: whoever reaches the node's address can use it"))
    return True


class Job:
    """The server process, the gate (transformers serve only) and the announcement, until one of
    them ends or the job is stopped."""

    def __init__(self, args, backend, address):
        self.args, self.backend, self.address = args, backend, address
        self.stop = threading.Event()
        self.server = None
        self.ended = None

    async def run(self, popen=subprocess.Popen):
        args = self.args
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(number, stopped.set)
        gate = None
        if self.backend == "vllm":
            port = args.port or serve_gate.free_port(self.address)
            server_address, server_port = self.address, port
        else:
            server_address, server_port = "127.0.0.1", serve_gate.free_port("127.0.0.1")
            gate = serve_gate.Gate(server_port, args.key)
            port = await gate.start(self.address, args.port)
        command = server_command(self.backend, sys.executable, args.model, server_address, server_port, args.gpus,
                                 args.server_args)
        self.server = popen(command, env=server_environment(self.backend, os.environ, args.key_env, args.key))
        say("job %s serves %s with %s on %s:%d" % (args.job_id, args.model, self.backend, self.address, port))
        threading.Thread(target=announce_when_ready, args=(args, self.address, port, self.backend, self.stop),
                         daemon=True).start()
        watch = loop.create_task(self.server_ended())
        stop = loop.create_task(stopped.wait())
        await asyncio.wait([watch, stop], return_when=asyncio.FIRST_COMPLETED)
        self.stop.set()
        if gate is not None:
            gate.server.close()
        if stop.done():
            say("the job is stopped: stopping the %s server" % self.backend)
            await self.end_server()
            return 0
        say("the %s server ended (exit code %s): its lines above say why" % (self.backend, self.server.returncode))
        return FAILED.code

    async def server_ended(self):
        while self.server.poll() is None:
            await asyncio.sleep(0.5)

    async def end_server(self):
        if self.server.poll() is not None:
            return
        self.server.terminate()
        for _tenth in range(STOP_GRACE * 10):
            if self.server.poll() is not None:
                return
            await asyncio.sleep(0.1)
        self.server.kill()
        self.server.wait()


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m llmtrain_node.serve_job")
    parser.add_argument("--serve-dir", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--model", required=True, help="the served model's name")
    parser.add_argument("--endpoint-file", required=True)
    parser.add_argument("--port", type=int, default=0, help="0: a port free on the node's address")
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--key-env", default="", help="the environment variable that holds the API key, if any")
    parser.add_argument("--job-id", default=os.environ.get("SLURM_JOB_ID", ""))
    parser.add_argument("--node", default=os.environ.get("SLURMD_NODENAME", ""))
    parser.add_argument("server_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.server_args[:1] == ["--"]:
        args.server_args = args.server_args[1:]
    args.key = os.environ.get(args.key_env, "") if args.key_env else ""
    args.node = args.node or os.uname().nodename
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    backend, missing = backend_of()
    if backend is None:
        say("slurm_python (%s) cannot serve: it lacks %s. To serve, %s; then run playbooks/serve.yml again." % (
            sys.executable, "; ".join("for %s: %s" % (name, ", ".join(modules)) for name, modules in missing.items()),
            INSTALL))
        return SETTING.code
    try:
        os.chdir(args.serve_dir)
        if os.path.lexists(args.endpoint_file):
            os.unlink(args.endpoint_file)  # an earlier job's: the play waits for this job's
        link_model(args.serve_dir, args.model, args.model_dir)
        address = serve_gate.node_address(args.node or None)
    except OSError as err:
        say("the serving job cannot start: %s" % err)
        return SETTING.code
    job = Job(args, backend, address)
    try:
        return asyncio.run(job.run())
    except OSError as err:  # the gate's port taken, a server that cannot be started
        say("the serving job cannot start its %s server: %s" % (backend, err))
        if job.server is not None and job.server.poll() is None:
            job.server.kill()
        return SETTING.code


if __name__ == "__main__":
    raise SystemExit(main())
