#!/usr/bin/env bash
# msgbench's pubsub system against RabbitMQ PerfTest (com.rabbitmq:perf-test 2.22.1 from Maven
# Central, bench/peers/perf-test/pom.xml, fetched into target/perf-test/libs) on one local
# RabbitMQ node started here (scripts/rabbitmq-server.sh, Debian's rabbitmq-server): one
# publisher and one consumer, 256-byte messages, as fast as the publisher goes, no publisher
# confirms, each delivery acknowledged (basic.ack), no prefetch bound — PerfTest's defaults —
# alternating the two tools for ROUNDS rounds (default 3), each on a queue of its own.
#   msgbench:   pacing immediate, RUN_SECONDS (default 8) measured from the start (no warm-up, as
#               PerfTest averages from its start); message rate = messages the subscription
#               received per second of the window (by receipt time; what it read after the
#               window, draining the queue, is not counted), and every message published was
#               delivered by the drain's end; client CPU = the whole msgbench process (opening,
#               publisher, subscriber, drain) per message delivered.
#   perf-test:  -x 1 -y 1 -s 256 -z RUN_SECONDS; message rate = its "receiving rate avg"; client
#               CPU = its whole JVM (what a client costs in Java: JIT and GC included) per
#               message received (that rate × RUN_SECONDS).
# Both tools read from the same broker on the same 2-CPU host: the broker takes most of the
# CPU, so each tool's rate is what the broker gives a client as light as that tool is.
# Prints the medians and the ratios issue 45 asks for: msgbench ≥ 1.0× the peer's message
# rate, client CPU per message ≤ 0.5× the peer's.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
SECONDS_EACH=${RUN_SECONDS:-8}
bash "$ROOT/scripts/setup.sh"
build_all
LIBS="$ROOT/target/perf-test/libs"
if ! ls "$LIBS"/perf-test-*.jar >/dev/null 2>&1; then
  echo "fetching RabbitMQ PerfTest's jars from Maven Central into $LIBS" >&2
  rm -rf "$LIBS.partial"
  mvn -q -B -f "$ROOT/bench/peers/perf-test/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$LIBS.partial" -DincludeScope=runtime >&2
  mv "$LIBS.partial" "$LIBS"
fi
machine
PORT=$(free_port)
DATA=$(mktemp -d)
bash "$ROOT/scripts/rabbitmq-server.sh" "$PORT" "$DATA" >/dev/null 2>&1 &
BROKER_PID=$!
trap 'kill $BROKER_PID 2>/dev/null; wait $BROKER_PID 2>/dev/null; rm -rf "$DATA"' EXIT
for _ in $(seq 600); do (echo > "/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
echo "broker: RabbitMQ $(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null) on 127.0.0.1:$PORT"
python3 - "$MSGBENCH" "$OUT" "$PORT" "$ROUNDS" "$LIBS" "$SECONDS_EACH" <<'PY'
import json, re, resource, statistics, subprocess, sys
msgbench, out, port, rounds, libs, seconds = sys.argv[1:7]
rounds, seconds = int(rounds), int(seconds)

def child_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime

def perf_test(k):
    before = child_cpu()
    text = subprocess.run(["java", "-Xmx1g", "-cp", f"{libs}/*", "com.rabbitmq.perf.PerfTest",
                           "-h", f"amqp://guest:guest@127.0.0.1:{port}", "-x", "1", "-y", "1",
                           "-s", "256", "-z", str(seconds), "-u", f"peer-{k}", "-ad", "true"],
                          capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    rate = float(re.search(r"receiving rate avg: ([\d.]+) msg/s", text).group(1))
    return rate, cpu / (rate * seconds)

def ours(k):
    before = child_cpu()
    text = subprocess.run([msgbench, "run", "--quiet", "--json", "--out", out,
                           "--duration", f"{seconds}s", "--warmup", "0s",
                           "--set", 'system="pubsub"', "--set", "sweep={}",
                           "--set", 'pubsub.broker="rabbitmq"', "--set", f'pubsub.address="127.0.0.1:{port}"',
                           "--set", f'pubsub.topic_prefix="ours-{k}"', "--set", 'pacing.mode="immediate"',
                           "--set", "pubsub.message_bytes=256", "--set", 'run.drain_timeout="20s"'],
                          capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    r = json.loads(text)["runs"][0]
    c = r["counters"]
    assert c["delivered"] > 0 and c["delivered"] == c["sent"], c
    in_window = sum(i["delivered"] for i in r["intervals"] if i["start_s"] < r["duration_s"] - 1e-6)
    return in_window / r["duration_s"], cpu / c["delivered"]

rows = {"msgbench": [], "perf-test": []}
for k in range(rounds):
    rows["msgbench"].append(ours(k))
    rows["perf-test"].append(perf_test(k))
    m, p = rows["msgbench"][-1], rows["perf-test"][-1]
    print(f"round {k + 1}: msgbench {m[0]/1e3:.1f} k msg/s at {m[1]*1e9:.0f} ns CPU/msg; "
          f"PerfTest {p[0]/1e3:.1f} k msg/s at {p[1]*1e9:.0f} ns CPU/msg", flush=True)
med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in rows.items()}
(ours_rate, ours_cpu), (peer_rate, peer_cpu) = med["msgbench"], med["perf-test"]
spread = lambda v: f"{min(r[0] for r in v)/1e3:.1f}-{max(r[0] for r in v)/1e3:.1f} k"
print(f"median: msgbench {ours_rate/1e3:.1f} k msg/s ({spread(rows['msgbench'])}) at {ours_cpu*1e9:.0f} ns CPU/msg; "
      f"PerfTest {peer_rate/1e3:.1f} k msg/s ({spread(rows['perf-test'])}) at {peer_cpu*1e9:.0f} ns CPU/msg")
print(f"message rate msgbench / PerfTest = {ours_rate/peer_rate:.2f}  (target >= 1.00)")
print(f"client CPU per message msgbench / PerfTest = {ours_cpu/peer_cpu:.2f}  (target <= 0.50)")
PY
