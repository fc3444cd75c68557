#!/usr/bin/env bash
# msgbench's http system against wrk (Debian's package, installed by scripts/setup.sh), in one
# invocation, alternating runs:
#
# 1. Throughput and client CPU: one nginx (one worker, started here on a free loopback port
#    with a generated configuration), 50 keep-alive connections, GET of a small static file,
#    as fast as it answers (msgbench closed loop, one client thread; wrk -t1 -c50). Prints the
#    median of ROUNDS rounds (default 3) of requests/s and client CPU per request (whole
#    process, from getrusage of the child), and the ratios: throughput >= 1.0x wrk's, client
#    CPU per request <= 0.8x wrk's. Then msgbench against the C floor (bench/floors/http_get:
#    epoll, one recv and one send per response, nothing parsed, timed or recorded): how much
#    above the kernel's own cost per request msgbench is.
# 2. Coordinated omission: `msgbench serve http` stalled 500 ms every 2 s, 10 connections.
#    msgbench open loop at 2000 requests/s; wrk closed loop. The model: a quarter of the
#    requests are due during a stall and wait for its end, so quantile q > 0.75 is
#    500 ms x (q - 0.75) / 0.25 (p90 300 ms, p99 480 ms, p99.9 498 ms). Prints each tool's
#    p90/p99/p99.9 against it. wrk 4 corrects its histogram after the run (it adds the samples
#    a closed loop missed, spaced by its mean interval per connection), so its p99 is near the
#    stall; the correction's interval includes the stalls, which leaves its p90 short.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
bash "$ROOT/scripts/setup.sh"
build_all
machine
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$WORK"; }
trap cleanup EXIT

# oha, the second peer: built once from crates.io into target/peers/oha (a few minutes on 2
# cores); when it does not build, its rows are left out and the script says so.
OHA="$ROOT/target/peers/oha/bin/oha"
if [ ! -x "$OHA" ]; then
  echo "building oha from crates.io into target/peers/oha (once)" >&2
  cargo install --quiet --locked oha --root "$ROOT/target/peers/oha" >/dev/null 2>&1 \
    || echo "oha did not build here; its rows are left out" >&2
fi
[ -x "$OHA" ] || OHA=""

NGINX_PORT=$(free_port)
start_nginx "$WORK" "$NGINX_PORT"

STALL_PORT=$(free_port)

python3 - "$MSGBENCH" "$OUT" "$NGINX_PORT" "$STALL_PORT" "$ROUNDS" "$OHA" "$FLOORS/http_get" <<'PY'
import json, re, resource, statistics, subprocess, sys
msgbench, out, nginx, stall, rounds, oha_bin, floor_bin = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6], sys.argv[7]

def child_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime

UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}

def wrk(port, path, connections, seconds):
    """requests/s, CPU-s per request, {quantile: seconds} (wrk's --latency lines)."""
    before = child_cpu()
    text = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency",
                           f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    n = int(re.search(r"(\d+) requests in", text).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    q = {}
    for pct, value, unit in re.findall(r"^\s+(\d+)%\s+([\d.]+)(us|ms|s)\s*$", text, re.M):
        q[int(pct) / 100] = float(value) * UNITS[unit]
    return rps, cpu / n, q

def oha(port, path, connections, seconds):
    """requests/s, CPU-s per request (oha with its defaults, no TUI)."""
    before = child_cpu()
    fmt = ["--output-format", "json"] if "--output-format" in subprocess.run(
        [oha_bin, "--help"], capture_output=True, text=True).stdout else ["-j"]
    text = subprocess.run([oha_bin, "-z", f"{seconds}s", "-c", str(connections), "--no-tui",
                           *fmt, f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    j = json.loads(text)
    n = sum(j["statusCodeDistribution"].values())
    return n / seconds, cpu / n

def floor(port, path, connections, seconds):
    """requests/s, CPU-s per request of the C floor (bench/floors/http_get.c)."""
    before = child_cpu()
    text = subprocess.run([floor_bin, "-p", str(port), "-c", str(connections), "-d", str(seconds), "-u", path],
                          capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    n, s = re.search(r"requests (\d+) seconds ([\d.]+)", text).groups()
    return int(n) / float(s), cpu / int(n)

def ours(port, path, sets, seconds, warmup="0"):
    before = child_cpu()
    args = [msgbench, "run", "--quiet", "--json", "--out", out, "--duration", f"{seconds}s", "--warmup", warmup,
            "--set", 'system="http"', "--set", "sweep={}", "--set", f'http.url="http://127.0.0.1:{port}"',
            "--set", f'http.requests={{ get = {{ path = "{path}" }} }}']
    for s in sets:
        args += ["--set", s]
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    r = json.loads(text)["runs"][0]
    c = r["counters"]
    assert c["delivered"] > 0 and c["failed"] == 0, (c, r["faults"])
    return c["delivered"] / r["duration_s"], cpu / c["delivered"], r["latency"]

print("1. nginx, GET /small.txt, 50 keep-alive connections, one client thread, 3 s per run")
# Each round runs msgbench, wrk and the C floor (bench/floors/http_get.c: epoll, one recv and one
# send per response, nothing parsed, timed or recorded) back to back.
tr, cr, ftr, fcr = [], [], [], []
for _ in range(rounds):
    a_rps, a_cpu, _ = ours(nginx, "/small.txt", ['pacing.mode="closed-loop"', "client.connections=50"], 3)
    b_rps, b_cpu, _ = wrk(nginx, "/small.txt", 50, 3)
    f_rps, f_cpu = floor(nginx, "/small.txt", 50, 3)
    tr.append(a_rps / b_rps)
    cr.append(a_cpu / b_cpu)
    ftr.append(f_rps / b_rps)
    fcr.append(f_cpu / b_cpu)
    print(f"   round: msgbench {a_rps/1e3:.1f}k/s {a_cpu*1e9:.0f} ns CPU/req; wrk {b_rps/1e3:.1f}k/s {b_cpu*1e9:.0f} ns CPU/req; "
          f"C floor {f_rps/1e3:.1f}k/s {f_cpu*1e9:.0f} ns CPU/req")
rounds_of = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
print(f"   throughput msgbench/wrk: median {statistics.median(tr):.2f} (rounds {rounds_of(tr)}); target >= 1.00")
print(f"   client CPU per request msgbench/wrk: median {statistics.median(cr):.2f} (rounds {rounds_of(cr)}); target <= 0.80")
print(f"   the C floor against wrk: throughput {statistics.median(ftr):.2f} (rounds {rounds_of(ftr)}), "
      f"CPU per request {statistics.median(fcr):.2f} (rounds {rounds_of(fcr)})")
if oha_bin:
    tr, cr = [], []
    for _ in range(rounds):
        a_rps, a_cpu, _ = ours(nginx, "/small.txt", ['pacing.mode="closed-loop"', "client.connections=50"], 3)
        b_rps, b_cpu = oha(nginx, "/small.txt", 50, 3)
        tr.append(a_rps / b_rps)
        cr.append(a_cpu / b_cpu)
        print(f"   round: msgbench {a_rps/1e3:.1f}k/s {a_cpu*1e9:.0f} ns CPU/req; oha {b_rps/1e3:.1f}k/s {b_cpu*1e9:.0f} ns CPU/req")
    print(f"   throughput msgbench/oha: median {statistics.median(tr):.2f}; client CPU per request msgbench/oha: median {statistics.median(cr):.2f}")
else:
    print("   oha: not built here, no rows")

print("2. msgbench serve http, stalled 500 ms every 2 s, 10 connections, 8 s per run")
import socket, time
def stalled_server():
    """A fresh server: its first stall starts now, so a run started now with a 1 s warm-up
    ends (at ~9 s) between stalls, where no request is left waiting to be given up."""
    p = subprocess.Popen([msgbench, "serve", "http", "--listen", f"127.0.0.1:{stall}", "--stall-every", "2s",
                          "--stall-for", "500ms", "--for", "60s"], stdout=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", int(stall)), 0.1).close()
            return p
        except OSError:
            time.sleep(0.02)
    raise SystemExit("serve http did not start")
model = {q: 0.5 * (q - 0.75) / 0.25 for q in (0.9, 0.99, 0.999)}
server = stalled_server()
_, _, l = ours(stall, "/", ['pacing.mode="rate"', "pacing.per_sec=2000", "client.connections=10"], 8, "1s")
server.terminate(); server.wait()
server = stalled_server()
m = {0.9: l["p90_ns"] / 1e9, 0.99: l["p99_ns"] / 1e9, 0.999: l["p999_ns"] / 1e9}
_, _, w = wrk(stall, "/", 10, 8)
server.terminate(); server.wait()
print(f"   {'':<10}{'model':>10}{'msgbench':>10}{'ratio':>7}{'wrk':>10}{'ratio':>7}")
for q, name in [(0.9, "p90"), (0.99, "p99")]:
    print(f"   {name:<10}{model[q]*1e3:>8.0f}ms{m[q]*1e3:>8.0f}ms{m[q]/model[q]:>7.2f}{w[q]*1e3:>8.0f}ms{w[q]/model[q]:>7.2f}")
print(f"   {'p99.9':<10}{model[0.999]*1e3:>8.0f}ms{m[0.999]*1e3:>8.0f}ms{m[0.999]/model[0.999]:>7.2f}{'(wrk prints no p99.9)':>24}")
PY
