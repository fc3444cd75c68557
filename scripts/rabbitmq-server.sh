#!/usr/bin/env bash
# Starts one RabbitMQ node (Debian's rabbitmq-server, installed by scripts/setup.sh) taking AMQP
# 0.9.1 on 127.0.0.1:PORT, with its data, log, Erlang cookie and settings in DIR (a new folder
# under ${TMPDIR:-/tmp}, removed when the node stops, when DIR is not given). Nothing of the
# machine's own RabbitMQ is used or touched: no system service, no /var/lib/rabbitmq.
#
# With DIR the node is this script's process (exec: stop it by its PID; a SIGKILL ends it
# too); without it, a child this script stops when sent SIGTERM or Ctrl-C, and then removes its
# folder. Erlang
# finds its nodes through epmd: the node gets an epmd of its own on EPMD_PORT, a child that
# dies with the node (its parent-death signal), and its distribution port DIST_PORT (both free
# loopback ports when not given), so nodes of several tests never meet.
#
# Its one user is `guest` (password `guest`, loopback only) unless RABBITMQ_USER is set: then
# that user, whose password is the first line of RABBITMQ_PASSWORD_FILE.
#
# With TLS_PORT set, a second listener takes AMQP over TLS on 127.0.0.1:TLS_PORT, with the
# certificate and key TLS_DIR/cert.pem and TLS_DIR/key.pem (PEM), asking for no client
# certificate.
#
#   bash scripts/rabbitmq-server.sh 5672
#   [sut] command = "exec bash scripts/rabbitmq-server.sh PORT"   (in a scenario)
set -euo pipefail
usage() { echo "usage: bash scripts/rabbitmq-server.sh PORT [DIR [EPMD_PORT DIST_PORT]]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 4 ] || usage
PORT="$1"
[[ "$PORT" =~ ^[0-9]+$ ]] && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] || usage
SERVER=/usr/lib/rabbitmq/bin/rabbitmq-server
if [ ! -x "$SERVER" ]; then
  echo "rabbitmq-server.sh: no $SERVER; install it with: bash scripts/setup.sh" >&2
  exit 1
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
if [ $# -ge 2 ]; then
  DIR="$2"
  mkdir -p "$DIR"
  KEEP=1
else
  DIR="$(mktemp -d "${TMPDIR:-/tmp}/msgbench-rabbitmq-$PORT-XXXXXX")"
  KEEP=0
fi
EPMD_PORT="${3:-$(free_port)}"
DIST_PORT="${4:-$(free_port)}"
[[ "$EPMD_PORT" =~ ^[0-9]+$ ]] && [[ "$DIST_PORT" =~ ^[0-9]+$ ]] || usage
USER_LINES=""
if [ -n "${RABBITMQ_USER:-}" ]; then
  PASSWORD="$(head -n1 "${RABBITMQ_PASSWORD_FILE:?RABBITMQ_PASSWORD_FILE names the password file}")"
  USER_LINES="default_user = $RABBITMQ_USER
default_pass = $PASSWORD
loopback_users = none"
fi
cat > "$DIR/rabbitmq.conf" <<CONF
listeners.tcp.1 = 127.0.0.1:$PORT
log.console = false
log.file.level = warning
disk_free_limit.absolute = 50MB
vm_memory_high_watermark.relative = 0.4
$USER_LINES
CONF
if [ -n "${TLS_PORT:-}" ]; then
  [[ "$TLS_PORT" =~ ^[0-9]+$ ]] || usage
  cat >> "$DIR/rabbitmq.conf" <<CONF
listeners.ssl.1 = 127.0.0.1:$TLS_PORT
ssl_options.certfile = ${TLS_DIR:?TLS_DIR holds cert.pem and key.pem}/cert.pem
ssl_options.keyfile = $TLS_DIR/key.pem
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
CONF
fi
chmod 600 "$DIR/rabbitmq.conf"
echo '[].' > "$DIR/enabled_plugins"
ERTS_EPMD="$(ls /usr/lib/erlang/erts-*/bin/epmd | head -n1)"
# epmd of its own, in the foreground, ended by the node's death (PR_SET_PDEATHSIG through
# setpriv: the parent is this process, which becomes the node below).
setpriv --pdeathsig KILL "$ERTS_EPMD" -port "$EPMD_PORT" -address 127.0.0.1 </dev/null >/dev/null 2>&1 &
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$EPMD_PORT") 2>/dev/null && break
  sleep 0.05
done
export HOME="$DIR" ERL_EPMD_PORT="$EPMD_PORT"
export RABBITMQ_NODENAME="msgbench-$PORT@localhost" RABBITMQ_DIST_PORT="$DIST_PORT"
export RABBITMQ_CONFIG_FILE="$DIR/rabbitmq.conf" RABBITMQ_ENABLED_PLUGINS_FILE="$DIR/enabled_plugins"
export RABBITMQ_MNESIA_BASE="$DIR/mnesia" RABBITMQ_LOG_BASE="$DIR/log" RABBITMQ_PID_FILE="$DIR/pid"
export RABBITMQ_ADVANCED_CONFIG_FILE="$DIR/advanced.config"
# Erlang would start a shared epmd daemon of its own: it uses the one above instead.
export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-start_epmd false -noinput"
# The node is this process (no signal-forwarding shell around it).
export RABBITMQ_ALLOW_INPUT=1
if [ "$KEEP" = 1 ]; then
  exec "$SERVER" </dev/null
fi
# Without DIR: a child, so its folder can be removed when it stops.
trap 'kill -TERM "$NODE" 2>/dev/null; wait "$NODE"; rm -rf "$DIR"' TERM INT
"$SERVER" </dev/null &
NODE=$!
wait "$NODE" || true
rm -rf "$DIR"
