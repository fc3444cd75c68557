#!/usr/bin/env bash
# Starts one Kafka broker in KRaft mode (broker and controller in one process) on
# 127.0.0.1:PORT, from the jars scripts/setup-kafka.sh fetched from Maven Central into
# target/kafka/libs. Its log goes to DIR, and the process becomes the broker (exec: stop it by
# its PID); without DIR, to a new folder under ${TMPDIR:-/tmp} that is removed when the broker
# is stopped (SIGTERM or Ctrl-C to this script's process group, as a scenario's [sut] does).
# Warnings and errors go to stderr.
#
# With DIR (and CONTROLLER_PORT) the script becomes the broker, so a SIGKILL to its PID (a
# test's parent-death signal) ends the JVM too. The controller listens on CONTROLLER_PORT when
# given (the tests pass a port reserved for them), else on a free loopback port.
#
# With SASL_SSL_PORT set, a second listener takes clients over TLS with SASL on
# 127.0.0.1:SASL_SSL_PORT: its certificate and key (PEM, the key PKCS#8) are TLS_DIR/cert.pem
# and TLS_DIR/key.pem; its one user SASL_USER, whose password is the first line of
# SASL_PASSWORD_FILE, logs in with SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN. With
# SASL_PLAINTEXT_PORT set too, a third listener takes the same logins without TLS. The
# PLAINTEXT listener stays, for the broker's own use.
#
# A cluster: start one broker per node with the same KAFKA_VOTERS (every node's
# `id@127.0.0.1:CONTROLLER_PORT`, comma-separated), each with its own KAFKA_NODE_ID, DIR and
# CONTROLLER_PORT, and KAFKA_REPLICAS (the replicas of its topics, default 1) at most the
# nodes there are. Every node is broker and controller (KRaft's combined mode).
#   KAFKA_NODE_ID=2 KAFKA_VOTERS=1@127.0.0.1:9192,2@127.0.0.1:9193,3@127.0.0.1:9194 \
#     KAFKA_REPLICAS=3 bash scripts/kafka-broker.sh 9093 /tmp/k2 9193
#
#   bash scripts/kafka-broker.sh 9092
#   [sut] command = "exec bash scripts/kafka-broker.sh PORT"   (in a scenario)
set -euo pipefail
usage() { echo "usage: bash scripts/kafka-broker.sh PORT [DIR [CONTROLLER_PORT]]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 3 ] || usage
PORT="$1"
[[ "$PORT" =~ ^[0-9]+$ ]] && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] || usage
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LIBS="$ROOT/target/kafka/libs"
if ! ls "$LIBS"/kafka_2.13-*.jar >/dev/null 2>&1; then
  echo "kafka-broker.sh: no Kafka jars in $LIBS; fetch them with: bash scripts/setup-kafka.sh" >&2
  exit 1
fi
if [ $# -ge 2 ]; then
  DIR="$2"
  mkdir -p "$DIR"
else
  DIR="$(mktemp -d "${TMPDIR:-/tmp}/msgbench-kafka-$PORT-XXXXXX")"
  trap 'rm -rf "$DIR"' EXIT
fi
# The controller listens on a second loopback port.
CONTROLLER="${3:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}"
[[ "$CONTROLLER" =~ ^[0-9]+$ ]] || usage
NODE_ID="${KAFKA_NODE_ID:-1}"
VOTERS="${KAFKA_VOTERS:-$NODE_ID@127.0.0.1:$CONTROLLER}"
REPLICAS="${KAFKA_REPLICAS:-1}"
[[ "$NODE_ID" =~ ^[0-9]+$ ]] && [[ "$REPLICAS" =~ ^[0-9]+$ ]] && [[ "$VOTERS" =~ ^[0-9@.:,]+$ ]] || usage
# Two of three replicas must have a write (acks = all) when there are three or more.
MIN_ISR=$(( REPLICAS >= 3 ? 2 : 1 ))
cat > "$DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=$NODE_ID
controller.quorum.voters=$VOTERS
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$DIR/data
num.partitions=1
auto.create.topics.enable=true
default.replication.factor=$REPLICAS
min.insync.replicas=$MIN_ISR
offsets.topic.replication.factor=$REPLICAS
transaction.state.log.replication.factor=$REPLICAS
transaction.state.log.min.isr=$MIN_ISR
share.coordinator.state.topic.replication.factor=$REPLICAS
share.coordinator.state.topic.min.isr=$MIN_ISR
group.initial.rebalance.delay.ms=0
PROPS
JAVA_OPTS=(-Xms256m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true
  "-Dlog4j2.configurationFile=$ROOT/scripts/kafka/log4j2.xml")
FORMAT_SCRAM=()
if [ -n "${SASL_SSL_PORT:-}" ]; then
  [[ "$SASL_SSL_PORT" =~ ^[0-9]+$ ]] || usage
  SASL_PASSWORD="$(head -n1 "$SASL_PASSWORD_FILE")"
  cat "$TLS_DIR/key.pem" "$TLS_DIR/cert.pem" > "$DIR/keystore.pem"
  sed -i "s|^listeners=.*|&,SASL_SSL://127.0.0.1:$SASL_SSL_PORT|; s|^advertised.listeners=.*|&,SASL_SSL://127.0.0.1:$SASL_SSL_PORT|" "$DIR/server.properties"
  cat >> "$DIR/server.properties" <<PROPS
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN
ssl.keystore.type=PEM
ssl.keystore.location=$DIR/keystore.pem
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$SASL_PASSWORD";
PROPS
  if [ -n "${SASL_PLAINTEXT_PORT:-}" ]; then
    [[ "$SASL_PLAINTEXT_PORT" =~ ^[0-9]+$ ]] || usage
    sed -i "s|^listeners=.*|&,SASL_PLAINTEXT://127.0.0.1:$SASL_PLAINTEXT_PORT|; s|^advertised.listeners=.*|&,SASL_PLAINTEXT://127.0.0.1:$SASL_PLAINTEXT_PORT|" "$DIR/server.properties"
    cat >> "$DIR/server.properties" <<PROPS
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$SASL_PASSWORD";
PROPS
  fi
  FORMAT_SCRAM=(--add-scram "SCRAM-SHA-256=[name=$SASL_USER,password=$SASL_PASSWORD]"
    --add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$SASL_PASSWORD]")
fi
# A fixed cluster id: each broker has its own log folder, so ids never meet.
java "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool format \
  -t MkU3OEVBNTcwNTJENDM2Qg -c "$DIR/server.properties" --ignore-formatted "${FORMAT_SCRAM[@]}" >/dev/null
if [ $# -ge 2 ]; then
  exec java "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.Kafka "$DIR/server.properties"
fi
# The folder is ours: the broker runs as a child, and the folder goes when it stops.
java "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.Kafka "$DIR/server.properties" &
BROKER=$!
trap 'kill $BROKER 2>/dev/null; rm -rf "$DIR"; wait $BROKER 2>/dev/null' EXIT
trap 'exit 143' TERM INT
wait $BROKER || true
