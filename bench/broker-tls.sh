#!/usr/bin/env bash
# What TLS to a broker costs msgbench: one nats-server plain and one with TLS (a test CA made
# here with openssl), the same pubsub run against each — NATS core, 20 000 messages/s of 256
# bytes to two subscriptions, 5 s measured after 1 s of warm-up — alternating for ROUNDS rounds
# (default 3). Client CPU = msgbench's whole process (handshakes, publisher, subscribers,
# collector), charged to the delivered messages; latency is end to end from the intended
# publish time. Prints per round and the medians, and the ratio TLS / plain of CPU per message.
#   bash bench/broker-tls.sh
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
bash "$ROOT/scripts/setup.sh"
build_all
machine
WORK="$(mktemp -d)"
NATS_SERVER=$(command -v nats-server || echo /usr/sbin/nats-server)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$WORK/ca-key.pem" \
  -out "$WORK/ca.pem" -subj "/CN=msgbench bench CA" -days 2 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$WORK/key.pem" \
  -out "$WORK/req.csr" -subj "/CN=127.0.0.1" 2>/dev/null
printf "subjectAltName=IP:127.0.0.1\n" > "$WORK/ext.cnf"
openssl x509 -req -in "$WORK/req.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca-key.pem" -CAcreateserial \
  -out "$WORK/cert.pem" -days 2 -extfile "$WORK/ext.cnf" 2>/dev/null
PLAIN=$(free_port)
TLS=$(free_port)
"$NATS_SERVER" -a 127.0.0.1 -p "$PLAIN" >/dev/null 2>&1 &
PLAIN_PID=$!
"$NATS_SERVER" -a 127.0.0.1 -p "$TLS" --tls --tlscert "$WORK/cert.pem" --tlskey "$WORK/key.pem" >/dev/null 2>&1 &
TLS_PID=$!
trap 'status=$?; kill $PLAIN_PID $TLS_PID 2>/dev/null; wait $PLAIN_PID $TLS_PID 2>/dev/null || true; rm -rf "$WORK"; exit $status' EXIT
wait_port "$PLAIN"
wait_port "$TLS"
python3 - "$MSGBENCH" "$OUT" "$PLAIN" "$TLS" "$WORK/ca.pem" "$ROUNDS" <<'PY'
import json, resource, statistics, subprocess, sys
msgbench, out, plain, tls, ca, rounds = sys.argv[1:6] + [int(sys.argv[6])]

def child_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime

def run(port, secure):
    sets = ['system="pubsub"', "sweep={}", f'pubsub.address="127.0.0.1:{port}"', 'pacing.mode="rate"',
            "pacing.per_sec=20000", "pubsub.message_bytes=256", "pubsub.subscriptions_per_topic=2"]
    if secure:
        sets.append(f'pubsub.tls={{ ca_file = "{ca}" }}')
    args = [msgbench, "run", "--quiet", "--json", "--out", out, "--duration", "5s", "--warmup", "1s"]
    for s in sets:
        args += ["--set", s]
    before = child_cpu()
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    r = json.loads(text)["runs"][0]
    c = r["counters"]
    return cpu / c["delivered"] * 1e9, r["latency"]["p50_ns"] / 1e3, r["latency"]["p99_ns"] / 1e3

rows = {"plain": [], "tls": []}
for i in range(rounds):
    for name, port, secure in (("plain", plain, False), ("tls", tls, True)):
        ns, p50, p99 = run(port, secure)
        rows[name].append((ns, p50, p99))
        print(f"round {i + 1} {name:5}: {ns:7.0f} ns CPU per message, p50 {p50:7.1f} µs, p99 {p99:8.1f} µs")
med = {k: [statistics.median(x[j] for x in v) for j in range(3)] for k, v in rows.items()}
for k, (ns, p50, p99) in med.items():
    spread = max(x[0] for x in rows[k]) - min(x[0] for x in rows[k])
    print(f"median {k:5}: {ns:7.0f} ns CPU per message (spread {spread:.0f} ns), p50 {p50:7.1f} µs, p99 {p99:8.1f} µs")
print(f"TLS / plain, CPU per message: {med['tls'][0] / med['plain'][0]:.2f}x")
PY
