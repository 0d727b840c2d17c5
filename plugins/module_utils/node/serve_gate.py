# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gate of the serving job (llmtrain_node.serve_job): an HTTP/1.1 server on the node's address
that hands each request with the API key to `transformers serve` on the node's 127.0.0.1 (which has
no key of its own), and streams its answers back as they come (SSE).

HTTP is parsed by h11, the parser of uvicorn (which `transformers serve` runs on, so it is there
wherever the gate runs) and of httpcore; the connections are asyncio's. What a client without the key
can hold is bounded before anything else:
- a connection waits for its request head at most HEAD_TIMEOUT seconds in all (not per read), and the
  head is at most MAX_HEAD_BYTES: past either it is closed;
- at most MAX_WAITING connections wait for a head, and MAX_WAITING_PER_ADDRESS of one client address:
  a new one past a bound closes the oldest waiting one (of that address, else of all), so that slow
  clients cannot keep a new one out;
- the key is checked on the head, before the body is read and before a request takes one of the
  MAX_ACTIVE slots of requests passed to the server.
A request the gate passes on is in origin form, with one Content-Length and no Transfer-Encoding;
the server gets the gate's own Host and never the key; its answer gets the gate's Server and Date.

This file imports nothing outside Python's standard library but h11, and that only in the gate's
functions: the rest runs wherever the run's other node scripts run."""

from __future__ import annotations

import asyncio
import collections
import email.utils
import hmac
import json
import os
import socket
import sys

# The request head a client may send (its request line and headers together), and its body:
# an OpenAI request is a few KB of JSON; a long prompt some hundred KB.
MAX_HEAD_BYTES = 32768
MAX_BODY_BYTES = 16 * 1048576
# Requests passed to the server at once; a keyed request beyond them gets 503 at once.
MAX_ACTIVE = 64
# Connections waiting for a request head, in all and per client address (see above).
MAX_WAITING = 512
MAX_WAITING_PER_ADDRESS = 32
# Seconds for a whole request head (from the connection, or from the previous answer on it); for a
# whole body; for each write to a client; for each part of the server's answer (a completion that is
# not streamed comes in one part, after all its tokens).
HEAD_TIMEOUT = 10
BODY_TIMEOUT = 60
WRITE_TIMEOUT = 60
BACKEND_TIMEOUT = 900
READ_BYTES = 65536
SERVER = b"llmtrain-serve-gate"
# Headers of one hop (RFC 9110, 7.6.1), and what the gate sets itself on each side: the key stays at
# the gate; the server gets the gate's Host and Content-Length, the client the gate's Server and Date.
REQUEST_DROPPED = frozenset((b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
                             b"trailer", b"transfer-encoding", b"upgrade", b"host", b"authorization",
                             b"content-length", b"expect", b"proxy-connection"))
ANSWER_DROPPED = frozenset((b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
                            b"trailer", b"transfer-encoding", b"upgrade", b"server", b"date", b"proxy-connection"))
REASONS = {400: "Bad Request", 401: "Unauthorized", 408: "Request Timeout", 411: "Length Required",
           413: "Content Too Large", 414: "URI Too Long", 431: "Request Header Fields Too Large",
           501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable"}


def say(text):
    sys.stderr.write("llmtrain: %s\n" % text)
    sys.stderr.flush()


def bearer_ok(header, key):
    """Whether an Authorization header (bytes or str) carries the key, compared in constant time; any
    header passes when there is no key."""
    if not key:
        return True
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    scheme, _sep, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"),
                                                              key.encode("utf-8"))


def error_body(message, kind, code):
    """An error as the OpenAI API words one, so that its clients show the message."""
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode("utf-8")


def refusal(status, message, kind="invalid_request_error", code=None):
    """A whole answer that refuses a request and closes the connection, as bytes: written as it is,
    whatever state the client's request left the parser in."""
    body = error_body(message, kind, code)
    head = ["HTTP/1.1 %d %s" % (status, REASONS[status]), "Server: %s" % SERVER.decode(),
            "Date: %s" % email.utils.formatdate(usegmt=True), "Content-Type: application/json",
            "Content-Length: %d" % len(body), "Connection: close"]
    if status == 401:
        head.append("WWW-Authenticate: Bearer")
    if status == 503:
        head.append("Retry-After: 1")
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body


class Refused(Exception):
    """A request the gate answers itself, with status and message, and then closes."""

    def __init__(self, status, message, kind="invalid_request_error", code=None):
        super().__init__(message)
        self.answer = refusal(status, message, kind, code)


class Waiting:
    """The connections that wait for a request head, oldest first, in all and by client address; one
    added past a bound closes the oldest of its address, else the oldest of all. Each is its
    transport (what closes it)."""

    def __init__(self, most=MAX_WAITING, per_address=MAX_WAITING_PER_ADDRESS):
        self.most, self.per_address = most, per_address
        self.all = collections.OrderedDict()
        self.by_address = {}
        self.closed = 0

    def __len__(self):
        return len(self.all)

    def add(self, transport, address):
        mine = self.by_address.setdefault(address, collections.OrderedDict())
        if len(mine) >= self.per_address:
            self.close(next(iter(mine)))
        elif len(self.all) >= self.most:
            self.close(next(iter(self.all)))
        self.all[transport] = address
        mine[transport] = True

    def remove(self, transport):
        address = self.all.pop(transport, None)
        mine = self.by_address.get(address)
        if mine is not None:
            mine.pop(transport, None)
            if not mine:
                del self.by_address[address]

    def close(self, transport):
        self.remove(transport)
        self.closed += 1
        transport.abort()


class Gate:
    """The gate's connections to clients and to the server on 127.0.0.1:backend_port; serve() runs it
    on (address, port) until stopped."""

    def __init__(self, backend_port, key, max_body=MAX_BODY_BYTES, max_active=MAX_ACTIVE, max_waiting=MAX_WAITING,
                 max_waiting_per_address=MAX_WAITING_PER_ADDRESS, head_timeout=HEAD_TIMEOUT, body_timeout=BODY_TIMEOUT,
                 write_timeout=WRITE_TIMEOUT, backend_timeout=BACKEND_TIMEOUT, backend_host="127.0.0.1"):
        import h11  # pylint: disable=import-outside-toplevel
        self.h11 = h11
        self.backend = (backend_host, backend_port)
        self.key, self.max_body, self.max_active = key, max_body, max_active
        self.head_timeout, self.body_timeout = head_timeout, body_timeout
        self.write_timeout, self.backend_timeout = write_timeout, backend_timeout
        self.waiting = Waiting(max_waiting, max_waiting_per_address)
        self.active = 0
        self.server = None

    async def start(self, address, port):
        """Listens on (address, port; 0: a free one) and returns the port."""
        self.server = await asyncio.start_server(self.connection, address, port, backlog=1024,
                                                 limit=READ_BYTES, reuse_address=True)
        return self.server.sockets[0].getsockname()[1]

    async def connection(self, reader, writer):
        h11 = self.h11
        peer = writer.get_extra_info("peername") or ("?", 0)
        client = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            while True:
                request = await self.head(reader, writer, client, peer[0])
                if request is None:
                    return
                await self.answer(request, reader, writer, client)
                if client.our_state is not h11.DONE or client.their_state is not h11.DONE:
                    return
                client.start_next_cycle()
        except Refused as refused:
            await self.write(writer, refused.answer)
        except (OSError, asyncio.TimeoutError, h11.ProtocolError):
            pass  # a client that went away, or that broke off what it sent: nothing to answer
        except Exception as err:  # pylint: disable=broad-except
            say("the gate could not serve a request: %s" % type(err).__name__)
        finally:
            self.waiting.remove(writer.transport)
            await self.close(writer)

    async def close(self, writer):
        """Closes a client's connection once what is written to it is sent (abort would drop the end of
        an answer still in the transport's buffer), within write_timeout."""
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), self.write_timeout)
        except (OSError, asyncio.TimeoutError):
            writer.transport.abort()

    async def head(self, reader, writer, client, address):
        """The next request's head (h11's Request), or None where the client closed; the client waits
        in self.waiting meanwhile, for at most head_timeout seconds."""
        h11 = self.h11
        self.waiting.add(writer.transport, address)
        try:
            event = await asyncio.wait_for(self.event(reader, client), self.head_timeout)
        except asyncio.TimeoutError:
            if not client.trailing_data[0]:
                return None  # an idle connection: closed without an answer that a new request could take for its own
            raise Refused(408, "The request's head did not come within %d s." % self.head_timeout) from None
        except h11.RemoteProtocolError as err:
            status = err.error_status_hint if err.error_status_hint in REASONS else 400
            raise Refused(status, "The gate refuses this request: %s." % (
                "its head is longer than %d bytes" % MAX_HEAD_BYTES if status == 431 else
                "it asks for a transfer coding the gate does not take" if status == 501 else "it is no valid HTTP/1.1"
            )) from None
        finally:
            self.waiting.remove(writer.transport)
        if isinstance(event, h11.ConnectionClosed):
            return None
        return event

    async def event(self, reader, connection):
        """The next event of an h11 connection, reading what it needs."""
        h11 = self.h11
        while True:
            event = connection.next_event()
            if event is not h11.NEED_DATA:
                return event
            connection.receive_data(await reader.read(READ_BYTES))

    def checked(self, request):
        """Refused unless the request's head is fit to pass on."""
        # h11 bounds a head that comes in parts; one that came whole in one read is measured here
        if len(request.method) + len(request.target) + sum(len(n) + len(v) + 4 for n, v in request.headers) > MAX_HEAD_BYTES:
            raise Refused(431, "The gate refuses this request: its head is longer than %d bytes." % MAX_HEAD_BYTES)
        headers = dict(request.headers)  # names lower case; h11 refused duplicates of the framing ones
        if not bearer_ok(headers.get(b"authorization"), self.key):
            # the body is not read: the connection goes
            raise Refused(401, "Incorrect API key: send it as 'Authorization: Bearer <key>'.", code="invalid_api_key")
        if not request.target.startswith(b"/"):
            raise Refused(400, "Send the request's path only (origin form), not a full URI or '*'.")
        if b"transfer-encoding" in headers:
            raise Refused(411, "Send the request body with a Content-Length.")
        if int(headers.get(b"content-length", b"0")) > self.max_body:  # h11 took ASCII digits only
            raise Refused(413, "The request body is longer than %d bytes." % self.max_body)

    async def answer(self, request, reader, writer, client):
        h11 = self.h11
        self.checked(request)
        if self.active >= self.max_active:
            raise Refused(503, "The server is busy with %d requests: try again." % self.active, kind="server_error")
        self.active += 1
        try:
            if client.they_are_waiting_for_100_continue:
                await self.write(writer, client.send(h11.InformationalResponse(status_code=100, headers=[])))
            # h11 ends every request with EndOfMessage, one without a body too
            body = await asyncio.wait_for(self.body(reader, client), self.body_timeout)
            await self.relay(request, body, writer, client)
        finally:
            self.active -= 1

    async def body(self, reader, client):
        h11 = self.h11
        parts = []
        while True:
            event = await self.event(reader, client)
            if isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            if not isinstance(event, h11.Data):
                raise h11.RemoteProtocolError("the body ended early")
            parts.append(event.data)

    async def relay(self, request, body, writer, client):
        """Passes the request to the server and its answer back; a server that does not answer is a 502."""
        h11 = self.h11
        headers = [(b"host", b"%s:%d" % (self.backend[0].encode(), self.backend[1]))]
        named = set(REQUEST_DROPPED) | connection_tokens(request.headers)
        headers += [(name, value) for name, value in request.headers if name not in named]
        if body or request.method in (b"POST", b"PUT", b"PATCH"):
            headers.append((b"content-length", b"%d" % len(body)))
        server = h11.Connection(h11.CLIENT, max_incomplete_event_size=4 * MAX_HEAD_BYTES)
        backend = None
        try:
            try:
                from_server, backend = await asyncio.wait_for(asyncio.open_connection(*self.backend),
                                                              self.backend_timeout)
                backend.write(server.send(h11.Request(method=request.method, target=request.target, headers=headers)))
                if body:
                    backend.write(server.send(h11.Data(data=body)))
                backend.write(server.send(h11.EndOfMessage()))
                await backend.drain()
                answer = await self.backend_event(from_server, server)
                while isinstance(answer, h11.InformationalResponse):
                    answer = await self.backend_event(from_server, server)
                if not isinstance(answer, h11.Response):
                    raise h11.RemoteProtocolError("no answer")
            except (OSError, asyncio.TimeoutError, h11.ProtocolError) as err:
                raise Refused(502, "The model server did not answer (%s)." % type(err).__name__,
                              kind="server_error") from None
            dropped = ANSWER_DROPPED | connection_tokens(answer.headers)
            kept = [(name, value) for name, value in answer.headers if name not in dropped]
            kept += [(b"server", SERVER), (b"date", email.utils.formatdate(usegmt=True).encode("ascii"))]
            await self.write(writer, client.send(h11.Response(status_code=answer.status_code, headers=kept,
                                                              reason=answer.reason)))
            # from here on, a server or client that breaks off ends both connections (connection())
            while True:
                event = await self.backend_event(from_server, server)
                if isinstance(event, h11.Data):
                    await self.write(writer, client.send(event))
                elif isinstance(event, h11.EndOfMessage):
                    await self.write(writer, client.send(h11.EndOfMessage()))
                    return
                else:
                    raise h11.RemoteProtocolError("the answer ended early")
        finally:
            if backend is not None:
                backend.transport.abort()

    async def backend_event(self, reader, connection):
        return await asyncio.wait_for(self.event(reader, connection), self.backend_timeout)

    async def write(self, writer, data):
        if data:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), self.write_timeout)


def connection_tokens(headers):
    """The header names a Connection header lists: of one hop too (RFC 9110, 7.6.1)."""
    names = set()
    for name, value in headers:
        if name == b"connection":
            names.update(token.strip().lower() for token in value.split(b","))
    return names


def node_address(name=None):
    """The IPv4 address the node's name resolves to, never a loopback one; raises OSError saying
    why not."""
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
