"""The serving job's gate (llmtrain_node.serve_gate) between real sockets: a small HTTP backend on
127.0.0.1 in the test, the gate in front of it, requests through the gate as a client sends them."""

import http.client
import http.server
import json
import os
import socket
import threading

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import serve_gate

KEY = "s3cret-key"


class Backend(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        self.requests = []
        self.next_chunk = threading.Event()
        super().__init__(("127.0.0.1", 0), BackendHandler)


class BackendHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass

    def do_GET(self):
        self.server.requests.append((self.command, self.path, dict(self.headers), b""))
        body = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests.append((self.command, self.path, dict(self.headers), body))
        if self.path == "/v1/stream":
            # the second event is sent only once the client has read the first through the gate
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for index, event in enumerate([b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"]):
                if index == 1:
                    self.server.next_chunk.wait(10)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        answer = json.dumps({"echo": json.loads(body)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


def serving(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def backend():
    server = serving(Backend())
    yield server
    server.shutdown()
    server.server_close()


def gate_of(backend, key, **kwargs):
    return serving(serve_gate.Gate("127.0.0.1", 0, backend.server_address[1], key, **kwargs))


@pytest.fixture
def gate(backend):
    server = gate_of(backend, KEY, max_body=4096)
    yield server
    server.shutdown()
    server.server_close()


def request(gate, method, path, body=None, headers=None):
    connection = http.client.HTTPConnection("127.0.0.1", gate.server_address[1], timeout=10)
    connection.request(method, path, body=body, headers=headers or {})
    answer = connection.getresponse()
    return answer, connection


def test_without_the_key_a_request_is_refused_with_the_openai_error_and_never_reaches_the_backend(gate, backend):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic " + KEY},
                    {"Authorization": "Bearer " + KEY + "x"}):
        headers = dict(headers, **{"Content-Type": "application/json"})
        answer, _connection = request(gate, "POST", "/v1/completions", b'{"prompt": "def "}', headers)
        assert answer.status == 401
        assert answer.getheader("WWW-Authenticate") == "Bearer"
        assert json.loads(answer.read())["error"]["code"] == "invalid_api_key"
    assert backend.requests == []


def test_with_the_key_requests_pass_both_ways_and_the_key_stays_at_the_gate(gate, backend):
    answer, connection = request(gate, "POST", "/v1/completions", b'{"prompt": "def "}',
                                 {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
    assert answer.status == 200 and json.loads(answer.read()) == {"echo": {"prompt": "def "}}
    # the same connection serves the next request (keep-alive)
    connection.request("GET", "/v1/models", headers={"Authorization": "bearer " + KEY})
    models = connection.getresponse()
    assert models.status == 200 and json.loads(models.read())["data"][0]["id"] == "tiny"
    assert [(method, path) for method, path, _h, _b in backend.requests] == [
        ("POST", "/v1/completions"), ("GET", "/v1/models")]
    assert all("Authorization" not in headers for _m, _p, headers, _b in backend.requests)
    assert backend.requests[0][2]["Content-Type"] == "application/json"


def test_a_stream_passes_through_event_by_event(gate, backend):
    answer, _connection = request(gate, "POST", "/v1/stream", b"{}", {"Authorization": "Bearer " + KEY})
    assert answer.status == 200 and answer.getheader("Content-Type") == "text/event-stream"
    # the first event arrives while the backend still holds back the second
    assert answer.read1(65536) == b"data: one\n\n"
    backend.next_chunk.set()
    assert answer.read() == b"data: two\n\ndata: [DONE]\n\n"


def test_an_oversized_body_or_head_is_refused_before_the_backend(gate, backend):
    answer, _connection = request(gate, "POST", "/v1/completions", b"x" * 5000, {"Authorization": "Bearer " + KEY})
    assert answer.status == 413 and "longer than 4096 bytes" in json.loads(answer.read())["error"]["message"]
    answer, _connection = request(gate, "GET", "/v1/models", headers={"Authorization": "Bearer " + KEY, "X-Big": "y" * 40000})
    assert answer.status == 431
    # a body sent in chunks has no length to bound before it is read
    chunked = {"Authorization": "Bearer " + KEY, "Transfer-Encoding": "chunked"}
    answer, _connection = request(gate, "POST", "/v1/completions", iter([b"{}"]), chunked)
    assert answer.status == 411
    assert backend.requests == []


def test_without_a_key_every_request_passes(backend):
    gate = gate_of(backend, "")
    try:
        answer, _connection = request(gate, "GET", "/v1/models")
        assert answer.status == 200
    finally:
        gate.shutdown()
        gate.server_close()


def test_a_backend_that_does_not_answer_gives_502(backend):
    port = serve_gate.free_port("127.0.0.1")
    gate = serving(serve_gate.Gate("127.0.0.1", 0, port, ""))
    try:
        answer, _connection = request(gate, "GET", "/v1/models")
        assert answer.status == 502 and json.loads(answer.read())["error"]["type"] == "server_error"
    finally:
        gate.shutdown()
        gate.server_close()


def test_the_endpoint_file_is_written_once_the_server_answers_and_holds_no_key(gate, tmp_path, monkeypatch):
    monkeypatch.setenv("LLMTRAIN_SERVE_API_KEY", KEY)
    path = tmp_path / "endpoint.json"
    args = serve_gate.parse_args(["announce", "--address", "127.0.0.1", "--port", str(gate.server_address[1]),
                                  "--endpoint-file", str(path), "--job-id", "42", "--node", "n1",
                                  "--backend", "transformers", "--model", "tiny", "--key-env", "LLMTRAIN_SERVE_API_KEY"])
    serve_gate.announce_when_ready(args, args.port)
    record = json.loads(path.read_text())
    assert {k: record[k] for k in ("job_id", "node", "address", "port", "backend", "model", "api_key")} == dict(
        job_id="42", node="n1", address="127.0.0.1", port=gate.server_address[1], backend="transformers",
        model="tiny", api_key=True)
    assert KEY not in path.read_text() and oct(os.stat(path).st_mode & 0o777) == "0o644"


def test_the_node_address_is_never_a_loopback_one(monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a: [(2, 1, 6, "", ("127.0.1.1", 0))])
    with pytest.raises(OSError, match="loopback address"):
        serve_gate.node_address("n1")
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a: [(2, 1, 6, "", ("127.0.1.1", 0)), (2, 1, 6, "", ("10.0.0.7", 0))])
    assert serve_gate.node_address("n1") == "10.0.0.7"
