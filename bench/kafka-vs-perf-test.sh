#!/usr/bin/env bash
# msgbench's pubsub system against Kafka's own kafka-producer-perf-test
# (org.apache.kafka.tools.ProducerPerformance, Kafka 4.1.1, from the jars scripts/setup-kafka.sh
# fetches) on one local KRaft broker started here (scripts/kafka-broker.sh): one producer, one
# partition, acks=1, 256-byte messages, as fast as the producer goes, alternating the two tools
# for ROUNDS rounds (default 3), each on a topic of its own.
#   msgbench:   pacing immediate, 3 s measured after 1 s of warm-up, one subscription reading
#               the topic at the same time (msgbench measures end to end; the peer only
#               produces, so the broker does more work for msgbench); message rate = messages
#               published per second of the measured window, every one of them delivered;
#               client CPU = its publisher thread, per message published (its subscriber
#               thread's CPU is printed beside it, not counted: the peer has no consumer).
#   perf-test:  --num-records 3000000 --record-size 256 --throughput -1, its default producer
#               settings (batch.size 16384, linger.ms 5); message rate = its final records/sec;
#               client CPU = its whole JVM (that is what a producer costs in Java: JIT and GC
#               included), per record.
# Prints the medians and the ratios the issue asks for: msgbench ≥ 1.0× the peer's message
# rate, client CPU per message ≤ 0.8× the peer's.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
bash "$ROOT/scripts/setup.sh"
build_all
machine
PORT=$(free_port)
DATA=$(mktemp -d)
bash "$ROOT/scripts/kafka-broker.sh" "$PORT" "$DATA" >/dev/null 2>&1 &
BROKER_PID=$!
trap 'kill $BROKER_PID 2>/dev/null; wait $BROKER_PID 2>/dev/null; rm -rf "$DATA"' EXIT
for _ in $(seq 300); do (echo > "/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
python3 - "$MSGBENCH" "$OUT" "$PORT" "$ROUNDS" "$ROOT/target/kafka/libs" <<'PY'
import json, re, resource, statistics, subprocess, sys
msgbench, out, port, rounds, libs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
N = 3_000_000

def child_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime

def perf_test(k):
    before = child_cpu()
    text = subprocess.run(["java", "-Xmx1g", "-cp", f"{libs}/*", "org.apache.kafka.tools.ProducerPerformance",
                           "--topic", f"peer-{k}", "--num-records", str(N), "--record-size", "256",
                           "--throughput", "-1", "--producer-props", f"bootstrap.servers=127.0.0.1:{port}", "acks=1"],
                          capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    last = [l for l in text.splitlines() if "50th" in l][-1]
    rate = float(re.search(r"([\d.]+) records/sec", last).group(1))
    return rate, cpu / N, 0.0

def ours(k):
    text = subprocess.run([msgbench, "run", "--quiet", "--json", "--out", out, "--duration", "3s",
                           "--warmup", "1s", "--set", 'system="pubsub"', "--set", "sweep={}",
                           "--set", 'pubsub.broker="kafka"', "--set", f'pubsub.address="127.0.0.1:{port}"',
                           "--set", f'pubsub.topic_prefix="ours-{k}"', "--set", 'pacing.mode="immediate"',
                           "--set", "pubsub.message_bytes=256", "--set", 'run.drain_timeout="5s"'],
                          capture_output=True, text=True, check=True).stdout
    r = json.loads(text)["runs"][0]
    c = r["counters"]
    assert c["delivered"] > 0 and c["delivered"] == c["sent"], c
    threads = {t["role"]: t["cpu"]["user_s"] + t["cpu"]["sys_s"] for t in r["cpu"]["threads"]}
    pub = sum(v for k, v in threads.items() if k.startswith("publisher"))
    sub = sum(v for k, v in threads.items() if k.startswith("subscriber"))
    return c["sent"] / r["duration_s"], pub / c["sent"], sub / c["sent"]

rows = {"msgbench": [], "perf-test": []}
for k in range(rounds):
    rows["msgbench"].append(ours(k))
    rows["perf-test"].append(perf_test(k))
    m, p = rows["msgbench"][-1], rows["perf-test"][-1]
    print(f"round {k + 1}: msgbench {m[0]/1e3:.0f} k msg/s, {m[1]*1e9:.0f} ns publisher CPU/msg (+{m[2]*1e9:.0f} ns subscriber); "
          f"kafka-producer-perf-test {p[0]/1e3:.0f} k msg/s, {p[1]*1e9:.0f} ns CPU/msg", flush=True)
med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in rows.items()}
(ours_rate, ours_cpu), (peer_rate, peer_cpu) = med["msgbench"], med["perf-test"]
spread = lambda v: f"{min(r[0] for r in v)/1e3:.0f}-{max(r[0] for r in v)/1e3:.0f} k"
print(f"median: msgbench {ours_rate/1e3:.0f} k msg/s ({spread(rows['msgbench'])}) at {ours_cpu*1e9:.0f} ns CPU/msg; "
      f"kafka-producer-perf-test {peer_rate/1e3:.0f} k msg/s ({spread(rows['perf-test'])}) at {peer_cpu*1e9:.0f} ns CPU/msg")
print(f"message rate msgbench / kafka-producer-perf-test = {ours_rate/peer_rate:.2f}  (target >= 1.00)")
print(f"client CPU per message msgbench / kafka-producer-perf-test = {ours_cpu/peer_cpu:.2f}  (target <= 0.80)")
PY
