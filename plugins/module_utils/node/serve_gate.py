# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving job's side of the OpenAI-compatible server (playbooks/serve.yml), on its node.

    python -m llmtrain_node.serve_gate address
        the node's address: its name (SLURMD_NODENAME) resolved, IPv4, not a loopback one
    python -m llmtrain_node.serve_gate free-port ADDRESS
        a port free on ADDRESS now (the kernel's choice), for a server that binds it itself
    python -m llmtrain_node.serve_gate gate --address A --port P --backend-port B ...
        listens on A:P (P 0: a free port) and forwards every request to 127.0.0.1:B, where
        `transformers serve` listens (it has no API key of its own): with a key set (the
        environment variable --key-env names), only requests that carry `Authorization: Bearer
        <key>`; request heads and bodies bounded, responses streamed through as they come (SSE)
    python -m llmtrain_node.serve_gate announce --address A --port P ...
        for a server that checks the key itself (vLLM): waits, as the gate does, until it answers

Either way the endpoint file (<run>/serve/endpoint.json: job id, node, address, port, backend,
model, whether a key is asked for, started) is written, atomically, once /v1/models answers:
the play waits for that file. The key itself is never written anywhere.

This file imports nothing outside Python's standard library: it runs on the batch node, beside
the run's other scripts."""

from __future__ import annotations

import argparse
import hmac
import http.client
import http.server
import json
import os
import socket
import sys
import threading
import time

from .atomic import replace_file

# The request head a client may send (its request line and headers together), and its body:
# an OpenAI request is a few KB of JSON; a long prompt some hundred KB.
MAX_HEAD_BYTES = 32768
MAX_BODY_BYTES = 16 * 1048576
# Connections served at once; a client beyond them gets 503 at once rather than a thread.
MAX_CONNECTIONS = 64
# Seconds a client may take to send its request, and the server to send the next part of an answer
# (a long completion that is not streamed comes in one part, after all its tokens).
CLIENT_TIMEOUT = 60
BACKEND_TIMEOUT = 900
# Hop-by-hop headers (RFC 9110, 7.6.1) are the gate's own on each side; the key stays at the gate.
HOP_BY_HOP = frozenset(("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host", "authorization", "content-length"))
CHUNK_BYTES = 65536


def say(text):
    sys.stderr.write("llmtrain: %s\n" % text)
    sys.stderr.flush()


def node_address(name=None):
    """The IPv4 address the node's name resolves to (SLURMD_NODENAME, else the host name), never a
    loopback one; raises OSError saying why not."""
    name = name or os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    addresses = [info[4][0] for info in socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)]
    usable = [address for address in addresses if not address.startswith("127.")]
    if not usable:
        raise OSError("the node's name %s resolves to %s only, a loopback address no other host reaches: "
                      "its name must resolve to the node's own address" % (name, ", ".join(addresses) or "nothing"))
    return usable[0]


def free_port(address):
    """A port nothing listens on at address now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def bearer_ok(header, key):
    """Whether an Authorization header carries the key (in constant time); any header without one."""
    if not key:
        return True
    scheme, _sep, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode("utf-8"), key.encode("utf-8"))


def error_body(message, kind, code):
    """An error as the OpenAI API words one, so that its clients show the message."""
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode("utf-8")


class Gate(http.server.ThreadingHTTPServer):
    """An HTTP/1.1 server on (address, port) that hands each request to the backend on
    127.0.0.1:backend_port (GateHandler)."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address, port, backend_port, key, max_body=MAX_BODY_BYTES, client_timeout=CLIENT_TIMEOUT,
                 backend_timeout=BACKEND_TIMEOUT, max_connections=MAX_CONNECTIONS):
        self.backend_port, self.key, self.max_body = backend_port, key, max_body
        self.client_timeout, self.backend_timeout = client_timeout, backend_timeout
        self.slots = threading.BoundedSemaphore(max_connections)
        super().__init__((address, port), GateHandler)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def handle_error(self, request, client_address):
        """A client that went away (a reset, a timeout) is none of the log's business; anything else
        is one line, without the request."""
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            say("the gate could not serve a request: %s" % type(error).__name__)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class GateHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "llmtrain-serve-gate"
    sys_version = ""

    def setup(self):
        super().setup()
        self.connection.settimeout(self.server.client_timeout)

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass  # no line per request in the job's log (a prompt is no one else's business)

    def refuse(self, status, message, kind="invalid_request_error", code=None, close=False):
        body = error_body(message, kind, code)
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def parse_request(self):
        if not super().parse_request():
            return False
        head = len(self.requestline) + sum(len(k) + len(v) + 4 for k, v in self.headers.items())
        if head > MAX_HEAD_BYTES:
            self.refuse(431, "The request's headers are longer than %d bytes." % MAX_HEAD_BYTES, close=True)
            return False
        return True

    def forward(self):
        self._started = False
        if not bearer_ok(self.headers.get("Authorization"), self.server.key):
            # the body is not read: the connection goes
            self.refuse(401, "Incorrect API key: send it as 'Authorization: Bearer <key>'.", code="invalid_api_key",
                        close=True)
            return
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.refuse(411, "Send the request body with a Content-Length.", close=True)
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self.refuse(400, "The request's Content-Length is no number of bytes.", close=True)
            return
        if length > self.server.max_body:
            self.refuse(413, "The request body is longer than %d bytes." % self.server.max_body, close=True)
            return
        body = self.rfile.read(length) if length else None
        headers = dict((k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP)
        backend = http.client.HTTPConnection("127.0.0.1", self.server.backend_port, timeout=self.server.backend_timeout)
        try:
            backend.request(self.command, self.path, body=body, headers=headers)
            answer = backend.getresponse()
            self.relay(answer)
        except (OSError, http.client.HTTPException) as err:
            if not self._started:
                self.refuse(502, "The model server did not answer (%s)." % type(err).__name__, kind="server_error",
                            close=True)
            else:
                self.close_connection = True
        finally:
            backend.close()

    def relay(self, answer):
        """The backend's answer to the client: as it is with a length, else in chunks as they come."""
        self._started = True
        self.send_response(answer.status, answer.reason)
        length = answer.getheader("Content-Length")
        for key, value in answer.getheaders():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        if length is not None and self.command != "HEAD":
            self.send_header("Content-Length", length)
            self.end_headers()
            remaining = int(length)
            while remaining > 0:
                data = answer.read(min(CHUNK_BYTES, remaining))
                if not data:
                    self.close_connection = True
                    return
                self.wfile.write(data)
                remaining -= len(data)
            return
        if self.command == "HEAD" or answer.status in (204, 304):
            self.send_header("Content-Length", length or "0")
            self.end_headers()
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while True:
            data = answer.read1(CHUNK_BYTES)
            if not data:
                break
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = forward


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


def endpoint_record(args, port, started, now=None):
    """What the endpoint file holds: where the server listens, and whose it is; never the key."""
    return {"job_id": args.job_id, "node": args.node, "address": args.address, "port": port,
            "backend": args.backend, "model": args.model, "api_key": bool(args.key),
            "started": started, "ready": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))}


def announce_when_ready(args, port, check=answers, sleep=time.sleep, clock=time.monotonic):
    """Waits until the server answers on (address, port), then writes the endpoint file. The
    server's own end (its process dies) ends the job, and this wait with it."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    began = clock()
    while not check(args.address, port, args.key):
        sleep(0.5)
    replace_file(args.endpoint_file, (json.dumps(endpoint_record(args, port, started), sort_keys=True) + "\n")
                 .encode("utf-8"), prefix=".endpoint.")
    say("%s serves %s on http://%s:%d/v1 (ready after %.1f s)%s" % (
        args.backend, args.model, args.address, port, clock() - began,
        "" if args.key else "; no API key is set: whoever reaches the node's address can use it"))


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m llmtrain_node.serve_gate")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("address")
    free = commands.add_parser("free-port")
    free.add_argument("address")
    for name in ("gate", "announce"):
        sub = commands.add_parser(name)
        sub.add_argument("--address", required=True)
        sub.add_argument("--port", type=int, required=True)
        sub.add_argument("--endpoint-file", required=True)
        sub.add_argument("--job-id", required=True)
        sub.add_argument("--node", required=True)
        sub.add_argument("--backend", required=True)
        sub.add_argument("--model", required=True)
        sub.add_argument("--key-env", default="", help="the environment variable that holds the API key, if any")
        if name == "gate":
            sub.add_argument("--backend-port", type=int, required=True)
            sub.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES)
    args = parser.parse_args(argv)
    if args.command in ("gate", "announce"):
        args.key = os.environ.get(args.key_env, "") if args.key_env else ""
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "address":
            sys.stdout.write("%s\n" % node_address())
            return 0
        if args.command == "free-port":
            sys.stdout.write("%s\n" % free_port(args.address))
            return 0
        if args.command == "announce":
            announce_when_ready(args, args.port)
            return 0
        gate = Gate(args.address, args.port, args.backend_port, args.key, max_body=args.max_body_bytes)
    except OSError as err:
        say("serve_gate %s: %s" % (args.command, err))
        return 1
    worker = threading.Thread(target=announce_when_ready, args=(args, gate.server_address[1]), daemon=True)
    worker.start()
    try:
        gate.serve_forever()
    finally:
        gate.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
