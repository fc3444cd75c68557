#!/usr/bin/env bash
# Does the built-in RPC server serve its connections in turn? (issue 22, docs/limits.md)
#
# examples/pacing.toml at interval 0 (every connection refills its window of 100 as fast as it is
# answered), 2 s, against the built-in server in-process and as `msgbench serve rpc` in its own
# process (one server thread either way), with client threads x connections 1x1, 1x4 and 2x2.
# Prints delivered/s, p99 and max latency, and each max against the single connection's of the
# same server (target: within 20x). About 30 s.
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
    r = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)["runs"][0]
    return r["counters"]["delivered"] / r["duration_s"], r["latency"]["p99_ns"], r["latency"]["max_ns"]
for external in (False, True):
    print("serve rpc, its own process" if external else "built-in server, in-process")
    base = None
    for threads, conns in ((1, 1), (1, 4), (2, 2)):
        rate, p99, mx = run(threads, conns, external)
        base = base or mx
        print(f"   {threads} x {conns}: {rate/1e3:.0f}k/s  p99 {p99/1e3:.0f} µs  max {mx/1e6:.2f} ms  "
              f"max / single connection's {mx/base:.1f} (target <= 20)")
PY
