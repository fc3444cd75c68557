#!/usr/bin/env bash
# A gRPC server stream at 100k messages/s, measured like a feed (`system = "ticks"` with
# [ticks.grpc], examples/grpc-stream.toml): `msgbench serve grpc` streams msgbench.Feed/Ticks
# to one client, every 1000th sequence number left out on purpose. Per round (ROUNDS, default
# 3; RATE and DURATION, seconds, change the load): messages delivered in the measured window, latencies
# recorded (must equal delivered), gaps found against the server's skipped ones (one per 999
# delivered), duplicates, reordering and every other fault (must be 0), latency percentiles
# from each message's due time, and the client's CPU per message (getrusage of the msgbench
# run, the server excluded: it runs in its own process).
#
# No peer tool measures a stream message by message (ghz counts one call, however many
# messages it streams), so there is no ratio here: the figures are the must-show's checks.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-100000}
DURATION=${DURATION:-5}
build_all
machine

python3 - "$MSGBENCH" "$OUT" "$ROOT" "$ROUNDS" "$RATE" "$DURATION" <<'PY'
import json, resource, socket, statistics, subprocess, sys, time
msgbench, out, root, rounds, rate, seconds = sys.argv[1:4] + [int(x) for x in sys.argv[4:7]]

def child_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

port = free_port()
server = subprocess.Popen([msgbench, "serve", "grpc", "--listen", f"127.0.0.1:{port}", "--for", "600s"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", port), 0.1).close(); break
    except OSError:
        time.sleep(0.02)
message = '{"rate": "%d", "gapEvery": "1000", "size": 64}' % rate
print(f"serve grpc -> msgbench.Feed/Ticks at {rate/1e3:.0f}k/s, 64-byte payloads, every 1000th left out; "
      f"one client, {seconds} s measured after 1 s of warm-up")
print(f"{'round':>5} {'delivered':>10} {'latencies':>10} {'gaps':>6} {'expected':>8} {'other':>6} "
      f"{'p50':>8} {'p99':>8} {'p99.9':>8} {'max':>8} {'CPU/msg':>8}")
cpu_per = []
for i in range(rounds):
    before = child_cpu()
    args = [msgbench, "run", f"{root}/examples/grpc-stream.toml", "--quiet", "--json", "--out", out,
            "--duration", f"{seconds}s", "--warmup", "1s", "--set", "sweep={}",
            "--set", f'ticks.address="http://127.0.0.1:{port}"',
            "--set", f"ticks.grpc.message='{message}'",
            "--set", f'ticks.grpc.proto="{root}/protos/msgbench.proto"',
            "--set", "ticks.clients={ fast = { connections = 1 } }"]
    r = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)["runs"][0]
    cpu = child_cpu() - before
    c, s, l, f = r["counters"], r["sequence"], r["latency"], r["faults"]
    other = s["duplicates"] + s["reordered"] + c["failed"] + f["disconnects"] + f["protocol_errors"]
    expected = c["delivered"] / 999
    cpu_per.append(cpu / c["delivered"])
    ms = lambda ns: f"{ns/1e6:.2f}ms"
    print(f"{i+1:>5} {c['delivered']:>10} {l['count']:>10} {c['dropped']:>6} {expected:>8.0f} {other:>6} "
          f"{ms(l['p50_ns']):>8} {ms(l['p99_ns']):>8} {ms(l['p999_ns']):>8} {ms(l['max_ns']):>8} "
          f"{cpu_per[-1]*1e9:>6.0f}ns")
    ok = l["count"] == c["delivered"] and abs(c["dropped"] - expected) <= 2 and other == 0
    print(f"      every message's latency recorded, gaps = the server's, nothing else lost: {'yes' if ok else 'NO'}")
server.terminate()
print("server:", server.communicate()[0].strip().replace("\n", "; "))
print(f"client CPU per message: median {statistics.median(cpu_per)*1e9:.0f} ns (whole msgbench process, warm-up and start included)")
PY
