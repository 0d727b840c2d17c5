"""A webhook receiver of a test's own: a real HTTP server that records what run_notify's posts
deliver (tests/unit/test_notify.py on 127.0.0.1; the reliability tests on the local cluster's
bridge, which the nodes reach)."""

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """A webhook: records each post's path and JSON body; `hold` makes it answer only once that
    file exists (or after 20 s), as a webhook that hangs."""

    def __init__(self, address, hold=None):
        self.posts, self.hold = [], hold
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.posts.append((self.path, body, time.time()))
                deadline = time.time() + 20
                while receiver.hold and not os.path.exists(receiver.hold) and time.time() < deadline:
                    time.sleep(0.05)
                try:
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:  # the sender gave up waiting (a webhook that hangs)
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((address, 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path="/hook"):
        return "http://%s:%d%s" % (self.server.server_address[0], self.server.server_address[1], path)

    def close(self):
        self.server.shutdown()
        self.server.server_close()
