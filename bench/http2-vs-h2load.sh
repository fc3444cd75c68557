#!/usr/bin/env bash
# msgbench's http system over HTTP/2 (http.version = "2") against h2load (nghttp2's load
# client, Debian's nghttp2-client, installed by scripts/setup.sh), in one invocation,
# alternating runs: one nginx (one worker, `listen ... http2`: cleartext HTTP/2 with prior
# knowledge, started here on a free loopback port with a generated configuration), 4
# connections x 64 concurrent streams, GET of a small static file, as fast as it answers
# (msgbench closed loop, one client thread, which runs the caller and its connections; h2load
# -c4 -m64, one thread). Prints the median of ROUNDS rounds (default 3) of requests/s and client CPU per
# request (whole process, from getrusage of the child) and the ratios; the targets are
# requests/s >= 1.0x h2load's and client CPU per request <= 0.8x. Each round also runs msgbench
# with MSGBENCH_HTTP2_CLIENT=msgbench (msgbench's own HTTP/2 client instead of the default, the
# `h2` crate's), so the two clients are compared too. WINDOW=256 sets the streams per connection.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
bash "$ROOT/scripts/setup.sh"
build_all
machine
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$WORK"; }
trap cleanup EXIT
PORT=$(free_port)
start_nginx "$WORK" "$PORT" http2

python3 - "$MSGBENCH" "$OUT" "$PORT" "$ROUNDS" <<'PY'
import json, re, resource, statistics, subprocess, sys
msgbench, out, port, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
SECONDS, CONNECTIONS, STREAMS = 3, 4, int(__import__('os').environ.get('WINDOW', '64'))

def child_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime

def child_user():
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime

def h2load():
    before, user = child_cpu(), child_user()
    text = subprocess.run(["h2load", "-c", str(CONNECTIONS), "-m", str(STREAMS), "-D", str(SECONDS),
                           f"http://127.0.0.1:{port}/small.txt"], capture_output=True, text=True, check=True).stdout
    cpu, user = child_cpu() - before, child_user() - user
    done = int(re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", text).group(2))
    return done / SECONDS, cpu / done, user / done

def ours(client=None):
    import os
    env = dict(os.environ)
    env.pop("MSGBENCH_HTTP2_CLIENT", None)
    if client:
        env["MSGBENCH_HTTP2_CLIENT"] = client
    before, user = child_cpu(), child_user()
    args = [msgbench, "run", "--quiet", "--json", "--out", out, "--duration", f"{SECONDS}s", "--warmup", "0",
            "--set", 'system="http"', "--set", "sweep={}", "--set", f'http.url="http://127.0.0.1:{port}"',
            "--set", 'http.version="2"', "--set", 'http.requests={ get = { path = "/small.txt" } }',
            "--set", 'pacing.mode="closed-loop"', "--set", f"client.connections={CONNECTIONS}",
            "--set", f"client.window={STREAMS}"]
    r = json.loads(subprocess.run(args, capture_output=True, text=True, check=True, env=env).stdout)["runs"][0]
    cpu, user = child_cpu() - before, child_user() - user
    c = r["counters"]
    assert c["delivered"] > 0 and c["failed"] == 0, (c, r["faults"])
    return c["delivered"] / r["duration_s"], cpu / c["delivered"], user / c["delivered"]

print(f"nginx over HTTP/2 (h2c), GET /small.txt, {CONNECTIONS} connections x {STREAMS} streams, {SECONDS} s per run")
tr, cr, ur, kr, hr, hx = [], [], [], [], [], []
for _ in range(rounds):
    a_rps, a_cpu, a_user = ours()
    b_rps, b_cpu, b_user = h2load()
    h_rps, h_cpu, h_user = ours("msgbench")
    hx.append(h_rps / b_rps)
    hr.append(h_cpu / b_cpu)
    tr.append(a_rps / b_rps)
    cr.append(a_cpu / b_cpu)
    ur.append(a_user / b_user)
    kr.append((a_cpu - a_user) / (b_cpu - b_user))
    print(f"   round: msgbench {a_rps/1e3:.1f}k/s {a_cpu*1e9:.0f} ns CPU/req ({a_user*1e9:.0f} user); "
          f"h2load {b_rps/1e3:.1f}k/s {b_cpu*1e9:.0f} ns CPU/req ({b_user*1e9:.0f} user); "
          f"msgbench's own client {h_rps/1e3:.1f}k/s {h_cpu*1e9:.0f} ns CPU/req ({h_user*1e9:.0f} user)")
rounds_of = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
print(f"   throughput msgbench/h2load: median {statistics.median(tr):.2f} (rounds {rounds_of(tr)}); target >= 1.00")
print(f"   client CPU per request msgbench/h2load: median {statistics.median(cr):.2f} (rounds {rounds_of(cr)}); target <= 0.80")
print(f"      of which user space: median {statistics.median(ur):.2f} (rounds {rounds_of(ur)}); kernel: median {statistics.median(kr):.2f} (rounds {rounds_of(kr)})")
print(f"   msgbench's own client (MSGBENCH_HTTP2_CLIENT=msgbench)/h2load: throughput median {statistics.median(hx):.2f} (rounds {rounds_of(hx)}), "
      f"CPU per request median {statistics.median(hr):.2f} (rounds {rounds_of(hr)})")
PY
