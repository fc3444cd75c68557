#!/usr/bin/env bash
# Installs what the tests and benchmarks need beyond a Rust toolchain, from Debian's packages:
# redis-server and redis-tools (redis-benchmark), chromium for the browser tick clients and the
# report's browser check, nginx (nginx-light) for the http system's tests and wrk, the HTTP
# peer of the benchmarks, and h2load (nghttp2-client), their HTTP/2 peer; nghttpd
# (nghttp2-server), an HTTP/2 server msgbench did not write for the interop test; prometheus, which a
# test starts to scrape a run's live metrics; nats-server, mosquitto and rabbitmq-server, brokers
# of the pubsub tests;
# Java and Maven, which fetch and run Kafka, their fourth (scripts/setup-kafka.sh);
# python3-venv for the manifest check's kubernetes-validate; Slurm and munge for the Slurm
# test; and, from npm, the `ws` package of the Node.js feed (feeds/node). It also builds the
# example queue libraries (scripts/build-queues.sh).
# Idempotent: does nothing when present.
# msgbench never relies on a running Redis: tests and examples start their own on loopback.
set -euo pipefail
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
command -v chromium >/dev/null || need+=(chromium)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v wrk >/dev/null || need+=(wrk)
command -v h2load >/dev/null || need+=(nghttp2-client)
command -v nghttpd >/dev/null || [ -x /usr/sbin/nghttpd ] || need+=(nghttp2-server)
command -v prometheus >/dev/null || need+=(prometheus)
# The pubsub system's tests start their own brokers: NATS (Debian's nats-server), Mosquitto
# (MQTT) and Redis.
command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || need+=(nats-server)
command -v mosquitto >/dev/null || [ -x /usr/sbin/mosquitto ] || need+=(mosquitto)
# RabbitMQ (Debian's rabbitmq-server, with the Erlang it needs): the tests start their own
# node through scripts/rabbitmq-server.sh; the package's own service is never started.
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server)
# The Slurm test (crates/cli/tests/slurm.rs) starts a one-node cluster of its own
# (scripts/slurm-cluster.sh): Debian's slurmctld, slurmd, slurm-client (srun, sbatch) and munge.
command -v srun >/dev/null || need+=(slurm-client)
command -v munged >/dev/null || [ -x /usr/sbin/munged ] || need+=(munge)
command -v slurmd >/dev/null || [ -x /usr/sbin/slurmd ] || need+=(slurmd)
command -v slurmctld >/dev/null || [ -x /usr/sbin/slurmctld ] || need+=(slurmctld)
# Kafka (the pubsub tests' fourth broker) runs on Java from jars Maven fetches
# (scripts/setup-kafka.sh, after the packages).
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need+=(maven)
# scripts/check-manifest.sh makes a virtualenv for kubernetes-validate (PyPI); the described
# wire's tests (crates/engine/tests/own_wire_runs.rs) run servers written in Python.
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
# The Node.js feed of the feed tests (feeds/node): the `ws` package from the npm registry, into
# that folder's node_modules (nothing global), at the version package-lock.json pins.
FEED="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/feeds/node"
if [ ! -d "$FEED/node_modules/ws" ]; then
  command -v npm >/dev/null || { echo "scripts/setup.sh: the feed tests need Node.js and npm" >&2; exit 1; }
  echo "scripts/setup.sh: installing the ws package into feeds/node (npm ci)" >&2
  (cd "$FEED" && npm ci --no-audit --no-fund --silent >/dev/null)
fi
# The example queue libraries (examples/queues/*.c → target/queues/), which the queue-library
# example and tests load.
bash "$(dirname "${BASH_SOURCE[0]}")/build-queues.sh"
if [ ${#need[@]} -eq 0 ]; then
  bash "$(dirname "${BASH_SOURCE[0]}")/setup-kafka.sh"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null; then
  SUDO=(sudo)
else
  echo "scripts/setup.sh: need ${need[*]} from apt, but this is not root and sudo is missing;" >&2
  echo "install them as root: apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "scripts/setup.sh: installing ${need[*]} (Debian packages)" >&2
export DEBIAN_FRONTEND=noninteractive
# Packages such as nginx and redis-server start a system service when installed; the tests
# start their own servers on free ports, so no service may start (policy-rc.d: 101 = refuse).
POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null
  "${SUDO[@]}" chmod +x "$POLICY"
  trap '"${SUDO[@]}" rm -f "$POLICY"' EXIT
fi
if ! "${SUDO[@]}" apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; then
  "${SUDO[@]}" apt-get update >/dev/null
  "${SUDO[@]}" apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
fi
bash "$(dirname "${BASH_SOURCE[0]}")/setup-kafka.sh"
