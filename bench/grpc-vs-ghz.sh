#!/usr/bin/env bash
# msgbench's gRPC unary calls (`http` requests with `grpc = ...`) against ghz, the gRPC load
# tool users reach for (built once from the Go module proxy into target/peers/ghz; when it does
# not build here, its rows are left out and the script says so), in one invocation:
#
# 1. Throughput and client CPU, alternating rounds: `msgbench serve grpc` (echo, no service
#    time, one thread) on a free loopback port; msgbench.Echo/Call with a small message from
#    protos/msgbench.proto; 4 connections and 64 calls in flight (msgbench: 4 x window 16,
#    closed loop; ghz: -c 64 --connections 4). Prints the median of ROUNDS rounds (default 3)
#    of calls/s and client CPU per call (whole process, getrusage of the child) and the
#    ratios; the targets are calls/s >= 1.0x ghz's at <= 0.5x its CPU per call.
# 2. Coordinated omission: `serve grpc` stalled 500 ms every 2 s (a fresh server, its first
#    stall at its start), 2000 calls/s for 8 s after a 1 s warm-up: msgbench open loop against
#    the model (a quarter of the calls are due during a stall and wait for its end: quantile
#    q > 0.75 is 500 ms x (q - 0.75) / 0.25), and ghz at --rps 2000 (its workers wait for
#    their answers, so its latency starts when a call actually goes).
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
build_all
machine
GHZ="$ROOT/target/peers/ghz/ghz"
if [ ! -x "$GHZ" ]; then
  echo "building ghz from the Go module proxy into target/peers/ghz (once)" >&2
  mkdir -p "$ROOT/target/peers/ghz"
  GOBIN="$ROOT/target/peers/ghz" GOPATH="$ROOT/target/peers/ghz/gopath" GOFLAGS=-modcacherw \
    go install github.com/bojand/ghz/cmd/ghz@v0.93.0 >/dev/null 2>&1 \
    || echo "ghz did not build here; its rows are left out" >&2
fi
[ -x "$GHZ" ] || GHZ=""

python3 - "$MSGBENCH" "$OUT" "$ROOT/protos/msgbench.proto" "$ROUNDS" "$GHZ" <<'PY'
import json, resource, socket, statistics, subprocess, sys, time
msgbench, out, proto, rounds, ghz = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
CALL, MESSAGE = "msgbench.Echo/Call", '{"payload":"aGVsbG8=","seq":"1"}'

def child_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def server(*flags):
    port = free_port()
    p = subprocess.Popen([msgbench, "serve", "grpc", "--listen", f"127.0.0.1:{port}", "--for", "120s", *flags],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.1).close()
            return p, port
        except OSError:
            time.sleep(0.02)
    raise SystemExit("serve grpc did not start")

def ours(port, seconds, sets, warmup="0"):
    before = child_cpu()
    args = [msgbench, "run", "--quiet", "--json", "--out", out, "--duration", f"{seconds}s", "--warmup", warmup,
            "--set", 'system="http"', "--set", "sweep={}", "--set", f'http.url="http://127.0.0.1:{port}"',
            "--set", f'http.proto="{proto}"',
            "--set", "http.requests={ call = { grpc = \"%s\", message = '%s' } }" % (CALL, MESSAGE)]
    for s in sets:
        args += ["--set", s]
    r = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)["runs"][0]
    cpu = child_cpu() - before
    c = r["counters"]
    assert c["delivered"] > 0 and c["failed"] == 0, (c, r["faults"])
    return c["delivered"] / r["duration_s"], cpu / c["delivered"], r["latency"]

def peer(port, seconds, flags):
    before = child_cpu()
    text = subprocess.run([ghz, "--insecure", "--proto", proto, "--call", CALL, "-d", MESSAGE, "-z", f"{seconds}s",
                           "-O", "json", *flags, f"127.0.0.1:{port}"], capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    j = json.loads(text)
    ok = j["statusCodeDistribution"].get("OK", 0)
    lat = {d["percentage"]: d["latency"] / 1e9 for d in j.get("latencyDistribution") or []}
    return ok / seconds, cpu / max(ok, 1), lat

print("1. serve grpc (echo, one thread), msgbench.Echo/Call, 4 connections x 64 calls in flight, 3 s per run")
srv, port = server()
tr, cr = [], []
for _ in range(rounds):
    a_rps, a_cpu, _ = ours(port, 3, ['pacing.mode="closed-loop"', "client.connections=4", "client.window=16"])
    line = f"   round: msgbench {a_rps/1e3:.1f}k/s {a_cpu*1e9:.0f} ns CPU/call"
    if ghz:
        b_rps, b_cpu, _ = peer(port, 3, ["-c", "64", "--connections", "4"])
        tr.append(a_rps / b_rps)
        cr.append(a_cpu / b_cpu)
        line += f"; ghz {b_rps/1e3:.1f}k/s {b_cpu*1e9:.0f} ns CPU/call"
    print(line)
srv.terminate(); srv.wait()
rounds_of = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
if ghz:
    print(f"   calls/s msgbench/ghz: median {statistics.median(tr):.2f} (rounds {rounds_of(tr)}); target >= 1.00")
    print(f"   client CPU per call msgbench/ghz: median {statistics.median(cr):.2f} (rounds {rounds_of(cr)}); target <= 0.50")
else:
    print("   ghz: not built here, no ratios")

print("2. serve grpc stalled 500 ms every 2 s, 2000 calls/s, 8 s after a 1 s warm-up")
model = {q: 0.5 * (q - 0.75) / 0.25 for q in (0.9, 0.99, 0.999)}
srv, port = server("--stall-every", "2s", "--stall-for", "500ms")
_, _, l = ours(port, 8, ['pacing.mode="rate"', "pacing.per_sec=2000", "client.connections=10", "client.window=256"], "1s")
srv.terminate(); srv.wait()
m = {0.9: l["p90_ns"] / 1e9, 0.99: l["p99_ns"] / 1e9, 0.999: l["p999_ns"] / 1e9}
w = {}
if ghz:
    srv, port = server("--stall-every", "2s", "--stall-for", "500ms")
    _, _, lat = peer(port, 9, ["-c", "10", "--connections", "10", "--rps", "2000"])
    srv.terminate(); srv.wait()
    w = {0.9: lat.get(90), 0.99: lat.get(99)}
print(f"   {'':<8}{'model':>9}{'msgbench':>10}{'ratio':>7}{'ghz':>9}{'ratio':>7}")
for q, name in [(0.9, "p90"), (0.99, "p99"), (0.999, "p99.9")]:
    g = w.get(q)
    peer_cols = f"{g*1e3:>7.1f}ms{g/model[q]:>7.3f}" if g is not None else f"{'-':>9}{'-':>7}"
    print(f"   {name:<8}{model[q]*1e3:>7.0f}ms{m[q]*1e3:>8.0f}ms{m[q]/model[q]:>7.2f}{peer_cols}")
PY
