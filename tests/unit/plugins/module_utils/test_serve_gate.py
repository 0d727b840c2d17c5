"""The serving job's gate (llmtrain_node.serve_gate) between real sockets: a small HTTP backend on
127.0.0.1 in the test, the gate in front of it (its own event loop in a thread), requests through the
gate as clients send them - the OpenAI client's, and those of clients that hold connections without a
key, trickle their heads, or send what a relay may read otherwise than its server."""

import asyncio
import http.client
import http.server
import json
import socket
import threading
import time

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
    server_version = "uvicorn"

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass

    def do_GET(self):
        self.server.requests.append((self.command, self.path, self.headers, b""))
        body = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests.append((self.command, self.path, self.headers, body))
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


@pytest.fixture
def backend():
    server = Backend()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


class Running:
    """A gate listening on 127.0.0.1, its loop in a thread of its own."""

    def __init__(self, gate):
        self.gate = gate
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run():
            asyncio.set_event_loop(self.loop)
            self.port = self.loop.run_until_complete(gate.start("127.0.0.1", 0))
            started.set()
            self.loop.run_forever()
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(10)

    def close(self):
        self.loop.call_soon_threadsafe(self.gate.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def gates(backend):
    running = []

    def make(key=KEY, backend_port=None, **limits):
        gate = Running(serve_gate.Gate(backend_port or backend.server_address[1], key, **limits))
        running.append(gate)
        return gate

    yield make
    for gate in running:
        gate.close()


@pytest.fixture
def gate(gates):
    return gates(max_body=4096)


def request(gate, method, path, body=None, headers=None):
    connection = http.client.HTTPConnection("127.0.0.1", gate.port, timeout=10)
    connection.request(method, path, body=body, headers=headers or {})
    answer = connection.getresponse()
    return answer, connection


def raw(gate, data, timeout=10):
    """What the gate answers to these bytes, as they are, until it closes the connection."""
    with socket.create_connection(("127.0.0.1", gate.port), timeout=timeout) as client:
        client.sendall(data)
        return receive_all(client)


def receive_all(client):
    answer = b""
    while True:
        try:
            part = client.recv(65536)
        except ConnectionResetError:
            return answer
        if not part:
            return answer
        answer += part


KEYED = b"Authorization: Bearer " + KEY.encode() + b"\r\n"


def test_without_the_key_a_request_is_refused_with_the_openai_error_and_never_reaches_the_backend(gate, backend):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic " + KEY},
                    {"Authorization": "Bearer " + KEY + "x"}, {"Authorization": "Bearer " + KEY[:-1]}):
        headers = dict(headers, **{"Content-Type": "application/json"})
        answer, _connection = request(gate, "POST", "/v1/completions", b'{"prompt": "def "}', headers)
        assert answer.status == 401
        assert answer.getheader("WWW-Authenticate") == "Bearer"
        assert json.loads(answer.read())["error"]["code"] == "invalid_api_key"
    assert raw(gate, b"GET /v1/models HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer " + KEY.encode() + b"\x00\r\n\r\n"
               ).startswith(b"HTTP/1.1 400 ")
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
    # one Server and one Date, the gate's: the backend's are not passed on beside them
    assert models.msg.get_all("Server") == ["llmtrain-serve-gate"] and len(models.msg.get_all("Date")) == 1


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


def test_a_head_past_its_bound_is_answered_431_as_soon_as_the_bound_is_reached(gate):
    """Before, 99 header lines of 65 KB each were read (6.4 MB) before the 431: now the answer comes
    while the client is still sending, once the head passes its 32 KiB."""
    with socket.create_connection(("127.0.0.1", gate.port), timeout=10) as client:
        client.sendall(b"GET /v1/models HTTP/1.1\r\nHost: g\r\n")
        sent = 0
        answer = b""
        client.settimeout(0.5)
        while not answer and sent < 99 * 65000:
            try:
                client.sendall(b"X-Filler: " + b"a" * 1000 + b"\r\n")
                sent += 1012
                if sent % 20240 == 0:
                    answer = client.recv(65536)
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        client.settimeout(10)
        answer = answer or receive_all(client)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert sent < 200000  # what the kernel's buffers took besides: far from the 6.4 MB


def test_what_a_relay_could_read_otherwise_than_its_server_is_refused(gate, backend):
    # two Transfer-Encoding headers (identity, then chunked) beside a Content-Length
    assert raw(gate, b"POST /v1/completions HTTP/1.1\r\nHost: g\r\n" + KEYED + b"Transfer-Encoding: identity\r\n"
               b"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}").startswith(b"HTTP/1.1 501 ")
    # a Content-Length that Python's int() reads as 10
    assert raw(gate, b"POST /v1/completions HTTP/1.1\r\nHost: g\r\n" + KEYED + b"Content-Length: 1_0\r\n\r\n"
               b"0123456789").startswith(b"HTTP/1.1 400 ")
    # two lengths, non-ASCII digits, a header line folded into the request line
    for head in (b"Content-Length: 2\r\nContent-Length: 3\r\n", "Content-Length: \u0664\r\n".encode(),
                 b"Content-Length : 2\r\n"):
        assert raw(gate, b"POST /v1/completions HTTP/1.1\r\nHost: g\r\n" + KEYED + head + b"\r\n{}").startswith(
            b"HTTP/1.1 400 "), head
    # an absolute-form URI (which would name another host) and '*'
    for target in (b"http://evil.example/v1/models", b"*"):
        answer = raw(gate, b"GET " + target + b" HTTP/1.1\r\nHost: g\r\n" + KEYED + b"\r\n")
        assert answer.startswith(b"HTTP/1.1 400 ") and b"origin form" in answer, answer
    # two Host headers
    assert raw(gate, b"GET /v1/models HTTP/1.1\r\nHost: g\r\nHost: h\r\n" + KEYED + b"\r\n").startswith(b"HTTP/1.1 400 ")
    assert backend.requests == []
    # what passes gets the gate's own Host
    answer, _connection = request(gate, "GET", "/v1/models", headers={"Authorization": "Bearer " + KEY, "Host": "evil.example"})
    assert answer.status == 200
    assert backend.requests[-1][2]["Host"] == "127.0.0.1:%d" % backend.server_address[1]


def test_a_head_must_come_whole_within_its_deadline_however_slowly_it_trickles(gates):
    gate = gates(head_timeout=1.5)
    with socket.create_connection(("127.0.0.1", gate.port), timeout=10) as client:
        began = time.monotonic()
        client.sendall(b"GET /v1/models HTTP/1.1\r\n")
        answer = b""
        for index in range(20):
            try:
                client.sendall(b"X-Slow-%d: a\r\n" % index)
            except (BrokenPipeError, ConnectionResetError):
                break
            client.settimeout(0.3)
            try:
                answer += client.recv(65536)
            except socket.timeout:
                continue
            if answer:
                break
        took = time.monotonic() - began
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert took < 3


def test_keyless_slow_clients_cannot_keep_a_keyed_one_out(gates, backend):
    """Three request slots; three keyless clients, then a hundred, each sending a header line every
    0.3 s, hold their connections open: the keyed client is answered at once each time, and the gate
    holds no more of one address's waiting connections than its bound."""
    gate = gates(max_active=3, max_waiting_per_address=8, head_timeout=30)
    slow = []
    stop = threading.Event()

    def trickle(client):
        index = 0
        while not stop.wait(0.3):
            try:
                client.sendall(b"X-Slow-%d: a\r\n" % index)
            except OSError:
                return
            index += 1

    try:
        for count in (3, 100):
            while len(slow) < count:
                client = socket.create_connection(("127.0.0.1", gate.port), timeout=10)
                client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: g\r\n")
                slow.append(client)
                threading.Thread(target=trickle, args=(client,), daemon=True).start()
            time.sleep(1)
            for _time in range(3):
                began = time.monotonic()
                answer, _connection = request(gate, "GET", "/v1/models", headers={"Authorization": "Bearer " + KEY})
                assert answer.status == 200 and time.monotonic() - began < 2
                answer.read()
            assert len(gate.gate.waiting) <= 8
        # the oldest waiting ones were closed for the newer ones
        assert gate.gate.waiting.closed >= 92
    finally:
        stop.set()
        for client in slow:
            client.close()


def test_past_the_request_slots_a_keyed_request_gets_503_at_once(gates, backend):
    gate = gates(max_active=1)
    first, _connection = request(gate, "POST", "/v1/stream", b"{}", {"Authorization": "Bearer " + KEY})
    assert first.read1(65536) == b"data: one\n\n"  # holds the one slot
    answer, _connection = request(gate, "GET", "/v1/models", headers={"Authorization": "Bearer " + KEY})
    assert answer.status == 503 and answer.getheader("Retry-After") == "1"
    backend.next_chunk.set()
    first.read()
    answer, _connection = request(gate, "GET", "/v1/models", headers={"Authorization": "Bearer " + KEY})
    assert answer.status == 200


def test_waiting_connections_are_bounded_by_address_then_in_all():
    class Transport:
        def __init__(self):
            self.aborted = False

        def abort(self):
            self.aborted = True

    waiting = serve_gate.Waiting(most=4, per_address=2)
    a1, a2, a3, b1, c1, d1 = (Transport() for _transport in range(6))
    for transport, address in ((a1, "a"), (a2, "a"), (a3, "a")):
        waiting.add(transport, address)
    assert a1.aborted and not a2.aborted and len(waiting) == 2  # the oldest of its address
    for transport, address in ((b1, "b"), (c1, "c"), (d1, "d")):
        waiting.add(transport, address)
    assert a2.aborted and len(waiting) == 4  # the oldest of all
    waiting.remove(a3)
    assert len(waiting) == 3 and waiting.by_address.keys() == {"b", "c", "d"}


def test_without_a_key_every_request_passes(gates):
    gate = gates(key="")
    answer, _connection = request(gate, "GET", "/v1/models")
    assert answer.status == 200


def test_a_backend_that_does_not_answer_gives_502(gates):
    gate = gates(key="", backend_port=serve_gate.free_port("127.0.0.1"))
    answer, _connection = request(gate, "GET", "/v1/models")
    assert answer.status == 502 and json.loads(answer.read())["error"]["type"] == "server_error"


def test_the_node_address_is_never_a_loopback_one(monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a: [(2, 1, 6, "", ("127.0.1.1", 0))])
    with pytest.raises(OSError, match="loopback address"):
        serve_gate.node_address("n1")
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a: [(2, 1, 6, "", ("127.0.1.1", 0)), (2, 1, 6, "", ("10.0.0.7", 0))])
    assert serve_gate.node_address("n1") == "10.0.0.7"
