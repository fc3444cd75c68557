#!/usr/bin/env python3
"""An OpenAI-compatible chat-completions server that streams (`"stream": true`), with known
timing, for msgbench's streamed-response tests and examples/llm-stream.toml (a server msgbench
did not write):

    python3 examples/llm/mock_openai.py --port 9103 [--first-ms 50] [--every-ms 10] [--tokens 20]
                                        [--stall-at 2.0 --stall-ms 500] [--cut-every N] [--for S]

POST /v1/chat/completions answers 200, text/event-stream, chunked: after --first-ms the first
chunk, then one every --every-ms, --tokens in all, each an event such as
    data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok3 "}}]}
then `data: [DONE]` and the end of the body. Times are due on an absolute schedule from the
request's arrival, so a late token does not push the ones after it. With --stall-at S
--stall-ms M, nothing is sent from S seconds after the first request until M ms later (every
stream in progress or starting waits: the stall a truth test injects). With --cut-every N,
every N-th stream is cut (its connection closed) after half its tokens. A request without
"stream": true gets one JSON answer. One thread per connection; HTTP/1.1 keep-alive.
"""
import argparse
import json
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
# When the first request came (the stall's clock): a load generator's warm-up starts there.
STARTED = [None]
COUNT_LOCK = threading.Lock()
COUNT = [0]


def stall_end(t):
    """When a send due at monotonic `t` may go: after the stall, if it falls in it."""
    if ARGS.stall_ms <= 0:
        return t
    if STARTED[0] is None:
        return t
    begin = STARTED[0] + ARGS.stall_at
    end = begin + ARGS.stall_ms / 1000.0
    return end if begin <= t < end else t


def wait_until(t):
    t = stall_end(t)
    while True:
        now = time.monotonic()
        if now >= t:
            return
        time.sleep(min(t - now, 0.05))
        t = stall_end(t)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        arrived = time.monotonic()
        length = int(self.headers.get("content-length") or 0)
        if length > 1 << 20:
            self.send_error(413)
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self.send_error(400, "not JSON")
            return
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        if not body.get("stream"):
            answer = json.dumps({"choices": [{"message": {"content": "tok " * ARGS.tokens}}]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            return
        with COUNT_LOCK:
            COUNT[0] += 1
            n = COUNT[0]
            if STARTED[0] is None:
                STARTED[0] = arrived
        cut = ARGS.cut_every > 0 and n % ARGS.cut_every == 0
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for k in range(ARGS.tokens):
            wait_until(arrived + (ARGS.first_ms + k * ARGS.every_ms) / 1000.0)
            if cut and k == ARGS.tokens // 2:
                self.close_connection = True
                self.connection.shutdown(2)
                return
            chunk = {"id": f"c{n}", "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": {"content": f"tok{k} "}}]}
            self.chunk(f"data: {json.dumps(chunk)}\n\n".encode())
        self.chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=9103)
    p.add_argument("--first-ms", type=float, default=50.0)
    p.add_argument("--every-ms", type=float, default=10.0)
    p.add_argument("--tokens", type=int, default=20)
    p.add_argument("--stall-at", type=float, default=0.0)
    p.add_argument("--stall-ms", type=float, default=0.0)
    p.add_argument("--cut-every", type=int, default=0)
    p.add_argument("--for", dest="run_for", type=float, default=0.0)
    ARGS = p.parse_args()
    if ARGS.tokens < 1 or ARGS.first_ms < 0 or ARGS.every_ms < 0:
        p.error("tokens ≥ 1, times ≥ 0")
    ThreadingHTTPServer.daemon_threads = True
    # The default listen backlog (5) drops a load generator's opening burst of connections.
    ThreadingHTTPServer.request_queue_size = 1024
    server = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    print(f"mock OpenAI server on http://127.0.0.1:{server.server_address[1]}/v1/chat/completions", flush=True)
    if ARGS.run_for > 0:
        threading.Timer(ARGS.run_for, server.shutdown).start()
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
