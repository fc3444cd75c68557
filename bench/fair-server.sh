#!/usr/bin/env bash
# Does the built-in RPC server serve its connections in turn? (issue 22, docs/limits.md)
#
# examples/pacing.toml at interval 0 (every connection refills its window of 100 as fast as it is
# answered), 2 s, against the built-in server in-process and as `msgbench serve rpc` in its own
# process (one server thread either way), with client threads x connections 1x1, 1x4 and 2x2.
# Prints delivered/s, p99 and max latency, each max against the single connection's of the
# same server (target: within 20x), and the run's fairness figures (Jain's index over the
# connections' deliveries, slowest / median per-connection p99). Then the same flood against the
# built-in ws-rpc server (one thread, 1x4). About 40 s.
source "$(dirname "$0")/common.sh"
(cd "$ROOT" && cargo build --release --quiet)
machine
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$MSGBENCH" serve rpc --listen "127.0.0.1:$PORT" --for 60s >/dev/null &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
python3 - "$MSGBENCH" "$OUT/fair-server" "$ROOT/examples/pacing.toml" "$PORT" <<'PY'
import json, subprocess, sys
msgbench, out, scenario, port = sys.argv[1:5]
def run(threads, conns, external):
    args = [msgbench, "run", scenario, "--quiet", "--json", "--out", out, "--duration", "2s",
            "--set", "sweep={}", "--set", 'pacing.every="0"',
            "--set", f"client.threads={threads}", "--set", f"client.connections={conns}"]
    if external:
        args += ["--set", f'rpc.address="127.0.0.1:{port}"']
    return measure(args)
def measure(args):
    r = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)["runs"][0]
    f = (r.get("fairness") or [{}])[0]
    fair = (f"Jain {f['jain_index']:.3f}  p99 slowest/median {f['p99_max_over_median']:.2f}"
            if f else "one connection")
    return r["counters"]["delivered"] / r["duration_s"], r["latency"]["p99_ns"], r["latency"]["max_ns"], fair
for external in (False, True):
    print("serve rpc, its own process" if external else "built-in server, in-process")
    base = None
    for threads, conns in ((1, 1), (1, 4), (2, 2)):
        rate, p99, mx, fair = run(threads, conns, external)
        base = base or mx
        print(f"   {threads} x {conns}: {rate/1e3:.0f}k/s  p99 {p99/1e3:.0f} µs  max {mx/1e6:.2f} ms  "
              f"max / single connection's {mx/base:.1f} (target <= 20)  {fair}")
print("ws-rpc, built-in server (one thread), interval 0, window 100")
import os
os.makedirs(out, exist_ok=True)
flood = f"{out}/ws-rpc-flood.toml"
with open(flood, "w") as f:
    f.write('name = "ws-rpc-flood"\nsystem = "ws-rpc"\n[run]\nduration = "2s"\nwarmup = "500ms"\n'
            '[client]\nwindow = 100\nwhen_full = "skip"\n'
            '[pacing]\nmode = "interval"\nevery = "0"\nbatch = 100\n')
base = None
for conns in (1, 4):
    rate, p99, mx, fair = measure([msgbench, "run", flood, "--quiet", "--json", "--out", out,
        "--set", f"client.connections={conns}"])
    base = base or mx
    print(f"   1 x {conns}: {rate/1e3:.0f}k/s  p99 {p99/1e3:.0f} µs  max {mx/1e6:.2f} ms  "
          f"max / single connection's {mx/base:.1f} (target <= 20)  {fair}")
PY
