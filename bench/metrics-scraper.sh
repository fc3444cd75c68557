#!/usr/bin/env bash
# Does a scraper disturb the measured run? docs/live-metrics.md.
#
# The rpc system (built-in server, 20k requests/s, 4 connections, 4 s) is run ROUNDS times
# (default 3) three ways, alternating: without live metrics; with `--metrics-listen` and a
# scraper fetching /metrics 100 times a second; and without live metrics while the same scraper
# fetches a stand-in page (a few KiB from a server in this script) 100 times a second — what
# the scraper alone costs a 2-CPU host. Prints each round's send lag p99 and latency p99 and
# their medians. About 45 s on 2 CPUs.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
(cd "$ROOT" && cargo build --release --quiet)
machine
python3 - "$MSGBENCH" "$OUT/metrics-scraper" "$ROUNDS" <<'PY'
import json, socket, statistics, subprocess, sys, threading, time
msgbench, out, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def scrape(port, stop, counts):
    while not stop.is_set():
        t = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                while c.recv(65536):
                    pass
            counts[0] += 1
        except OSError:
            pass
        time.sleep(max(0.0, 0.01 - (time.monotonic() - t)))

def stand_in(stop):
    """A server answering every connection with a page the size of msgbench's."""
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(64); srv.settimeout(0.2)
    page = b"HTTP/1.0 200 OK\r\nContent-Length: 3000\r\n\r\n" + b"#" * 3000
    def loop():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            with c:
                c.recv(8192); c.sendall(page)
        srv.close()
    threading.Thread(target=loop).start()
    return srv.getsockname()[1]

def run(mode):
    args = [msgbench, "run", "--json", "--quiet", "--out", out, "--duration", "4s", "--warmup", "500ms",
            "--set", 'system="rpc"', "--set", "sweep={}", "--set", 'pacing.mode="rate"',
            "--set", "pacing.per_sec=20000", "--set", "client.connections=4"]
    stop, counts, scraper = threading.Event(), [0], None
    if mode != "none":
        if mode == "msgbench":
            port = free_port()
            args += ["--metrics-listen", f"127.0.0.1:{port}", "--metrics-hold", "0"]
        else:
            port = stand_in(stop)
        scraper = threading.Thread(target=scrape, args=(port, stop, counts))
        scraper.start()
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    stop.set()
    if scraper:
        scraper.join()
    r = json.loads(text)["runs"][0]
    return r["send_lag"]["p99_ns"], r["latency"]["p99_ns"], counts[0]

print("rpc, 20k requests/s, 4 connections, 4 s: no scraper; a scraper at 100/s on msgbench's /metrics; the same on a stand-in page")
m = statistics.median
rows = {"none": [], "msgbench": [], "stand-in": []}
for _ in range(rounds):
    cells = []
    for mode in rows:
        lag, p99, scrapes = run(mode)
        rows[mode].append((lag, p99))
        cells.append(f"{mode}: lag {lag/1e3:.1f} µs p99 {p99/1e3:.1f} µs ({scrapes} scrapes)")
    print("   round: " + "; ".join(cells))
for mode, values in rows.items():
    print(f"   {mode:>9}: send lag p99 median {m(v[0] for v in values)/1e3:.1f} µs, latency p99 median {m(v[1] for v in values)/1e3:.1f} µs")
PY
