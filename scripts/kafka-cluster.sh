#!/usr/bin/env bash
# Starts a Kafka cluster of NODES KRaft brokers (default 3; each broker and controller) on
# loopback: node k (1..NODES) takes clients on PORT+k-1 and its controller on PORT+100+k-1,
# its log in a new folder under ${TMPDIR:-/tmp}. Every topic gets min(NODES, 3) replicas, two
# of them in sync for a write (acks = all) when there are three. Each node's PID and address
# go to stderr, so one can be shut down by hand during a run (kill -TERM PID: a controlled
# shutdown, its partitions' leadership handed to the others first).
#
# The script waits for its brokers; SIGTERM or Ctrl-C to it (as a scenario's [sut] sends)
# stops them all at once and removes their folders.
#
#   bash scripts/kafka-cluster.sh 9092          # brokers on 9092, 9093, 9094
#   [sut] command = "exec bash scripts/kafka-cluster.sh 9092"   (in a scenario)
set -euo pipefail
usage() { echo "usage: bash scripts/kafka-cluster.sh PORT [NODES]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
PORT="$1"
NODES="${2:-3}"
[[ "$PORT" =~ ^[0-9]+$ ]] && [[ "$NODES" =~ ^[0-9]+$ ]] || usage
[ "$NODES" -ge 1 ] && [ "$NODES" -le 9 ] && [ "$PORT" -ge 1 ] && [ $((PORT + 108)) -le 65535 ] || usage
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$(mktemp -d "${TMPDIR:-/tmp}/msgbench-kafka-cluster-$PORT-XXXXXX")"
VOTERS=""
for k in $(seq 1 "$NODES"); do
  VOTERS="$VOTERS${VOTERS:+,}$k@127.0.0.1:$((PORT + 100 + k - 1))"
done
PIDS=()
# Its brokers are stopped at once (SIGKILL): their logs are thrown away with the folder, and a
# scenario's [sut] allows 3 s before it kills the group, less than a cluster's own shutdown.
trap 'kill -KILL "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$DIR"' EXIT
trap 'exit 143' TERM INT
for k in $(seq 1 "$NODES"); do
  KAFKA_NODE_ID=$k KAFKA_VOTERS=$VOTERS KAFKA_REPLICAS=$(( NODES < 3 ? NODES : 3 )) \
    bash "$ROOT/scripts/kafka-broker.sh" $((PORT + k - 1)) "$DIR/node-$k" $((PORT + 100 + k - 1)) &
  PIDS+=($!)
  echo "kafka-cluster.sh: node $k on 127.0.0.1:$((PORT + k - 1)), pid $!" >&2
done
# Ends when every broker has (one shut down by hand leaves the others running).
wait
