#!/usr/bin/env bash
# msgbench's pubsub system against `nats bench` (the NATS CLI, natscli v0.5.0, built here from
# its Go module into target/peers) on one local nats-server started here: NATS core, one
# publisher and one subscriber on one subject, 256-byte messages, as fast as the publisher can
# go, alternating the two tools for ROUNDS rounds (default 3).
#   msgbench:    pacing immediate, 3 s measured, no warm-up; message rate = messages
#                delivered to the subscription per second of the measured window; client CPU =
#                its whole process (publisher, subscriber, collector, start-up, drain), charged
#                to the measured messages.
#   nats bench:  `nats bench sub` started first, then `nats bench pub`, 3 000 000 messages;
#                message rate = the subscriber's msgs/sec; client CPU = both processes.
# Prints the medians and the ratios the issue asks for: msgbench ≥ 1.0× nats bench's message
# rate, client CPU per message ≤ 0.8× nats bench's.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
bash "$ROOT/scripts/setup.sh"
build_all
machine
NATS="$ROOT/target/peers/nats"
if [ ! -x "$NATS" ]; then
  echo "building the NATS CLI (natscli v0.5.0) into target/peers" >&2
  GOBIN="$ROOT/target/peers" go install github.com/nats-io/natscli/nats@v0.5.0
fi
PORT=$(free_port)
NATS_SERVER=$(command -v nats-server || echo /usr/sbin/nats-server)
"$NATS_SERVER" -a 127.0.0.1 -p "$PORT" >/dev/null 2>&1 &
BROKER_PID=$!
trap 'status=$?; kill $BROKER_PID 2>/dev/null; wait $BROKER_PID 2>/dev/null || true; exit $status' EXIT
wait_port "$PORT"
python3 - "$MSGBENCH" "$OUT" "$PORT" "$ROUNDS" "$NATS" <<'PY'
import json, re, resource, statistics, subprocess, sys, time
msgbench, out, port, rounds, nats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
N = 3_000_000

def child_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime

def nats_bench():
    before = child_cpu()
    url = f"nats://127.0.0.1:{port}"
    sub = subprocess.Popen([nats, "-s", url, "bench", "sub", "bench.peer", "--msgs", str(N), "--size", "256",
                            "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    subprocess.run([nats, "-s", url, "bench", "pub", "bench.peer", "--msgs", str(N), "--size", "256",
                    "--no-progress"], capture_output=True, text=True, check=True)
    text = sub.communicate(timeout=120)[0]
    cpu = child_cpu() - before
    rate = float(re.search(r"subscriber stats: ([\d,]+) msgs/sec", text).group(1).replace(",", ""))
    return rate, cpu / N

def ours():
    before = child_cpu()
    text = subprocess.run([msgbench, "run", "--quiet", "--json", "--out", out, "--duration", "3s",
                           "--warmup", "0", "--set", 'system="pubsub"', "--set", "sweep={}",
                           "--set", f'pubsub.address="127.0.0.1:{port}"', "--set", 'pacing.mode="immediate"',
                           "--set", "pubsub.message_bytes=256"],
                          capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    r = json.loads(text)["runs"][0]
    c = r["counters"]
    c_all = c["delivered"] + c["dropped"] + c["in_flight_end"]
    assert c["delivered"] > 0 and c_all == c["sent"], c
    return c["delivered"] / r["duration_s"], cpu / c["delivered"]

rows = {"msgbench": [], "nats bench": []}
for k in range(rounds):
    rows["msgbench"].append(ours())
    rows["nats bench"].append(nats_bench())
    print(f"round {k + 1}: msgbench {rows['msgbench'][-1][0]/1e6:.2f} M msg/s, {rows['msgbench'][-1][1]*1e9:.0f} ns CPU/msg; "
          f"nats bench {rows['nats bench'][-1][0]/1e6:.2f} M msg/s, {rows['nats bench'][-1][1]*1e9:.0f} ns CPU/msg", flush=True)
med = {k: (statistics.median(r for r, _ in v), statistics.median(c for _, c in v)) for k, v in rows.items()}
(ours_rate, ours_cpu), (peer_rate, peer_cpu) = med["msgbench"], med["nats bench"]
print(f"median: msgbench {ours_rate/1e6:.2f} M msg/s at {ours_cpu*1e9:.0f} ns CPU/msg; nats bench {peer_rate/1e6:.2f} M msg/s at {peer_cpu*1e9:.0f} ns CPU/msg")
print(f"message rate msgbench / nats bench = {ours_rate/peer_rate:.2f}  (target >= 1.00)")
print(f"client CPU per message msgbench / nats bench = {ours_cpu/peer_cpu:.2f}  (target <= 0.80)")
PY
