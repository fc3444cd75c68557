# Shared helpers of the bench scripts: build msgbench and the C floors (bench/floors, built in a
# copy under target/ so the source folder stays clean), run msgbench with JSON output and pull
# numbers out of it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FLOORS_SRC="$ROOT/bench/floors"
FLOORS="$ROOT/target/floors"
MSGBENCH="$ROOT/target/release/msgbench"
OUT="$ROOT/target/bench-results"

build_all() {
  (cd "$ROOT" && cargo build --release --quiet)
  mkdir -p "$FLOORS"
  cp "$FLOORS_SRC"/*.c "$FLOORS_SRC"/*.h "$FLOORS_SRC"/Makefile "$FLOORS"/
  make -s -C "$FLOORS" >/dev/null
}

# msgbench_json FIELD_EXPR ARGS... : runs msgbench --json and prints a python expression of run `r`.
msgbench_json() {
  local expr="$1"; shift
  "$MSGBENCH" run --quiet --json --out "$OUT" "$@" |
    python3 -c "import json,sys; r=json.load(sys.stdin)['runs'][0]; print($expr)"
}

# build_tungstenite_peer : builds the tokio-tungstenite tick server (bench/peers/tungstenite-ticks,
# outside the workspace) and sets PEER to its binary.
build_tungstenite_peer() {
  (cd "$ROOT/bench/peers/tungstenite-ticks" && cargo build --release --quiet)
  PEER="$ROOT/bench/peers/tungstenite-ticks/target/release/tungstenite-ticks"
}

# median VALUES... : the median of the numbers given.
median() {
  python3 -c "import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"
}

machine() {
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr), clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
}

# start_server CMD... : starts a tick server that prints its ws:// address; sets SERVER_PID and
# URL. stop_server ends it.
start_server() {
  local log; log=$(mktemp)
  "$@" > "$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do
    URL=$(grep -o 'ws://[0-9.:]*' "$log" | head -1 || true)
    [ -n "$URL" ] && break
    sleep 0.05
  done
  [ -n "$URL" ] || { echo "server did not start: $(cat "$log")" >&2; exit 1; }
  rm -f "$log"
}
stop_server() { [ -n "${SERVER_PID:-}" ] || return 0; kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; }

# rpc_server_in_work THREADS FOR : a scratch directory WORK and `msgbench serve rpc` on a free
# loopback PORT (SERVER_PID), both gone at exit; returns once the server listens.
rpc_server_in_work() {
  WORK=$(mktemp -d)
  PORT=$(free_port)
  "$MSGBENCH" serve rpc --listen "127.0.0.1:$PORT" --threads "$1" --for "$2" >/dev/null 2>&1 &
  SERVER_PID=$!
  trap 'stop_server; rm -rf "$WORK"' EXIT
  wait_port "$PORT"
}

# free_port : a free loopback TCP port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_port PORT : waits (5 s at most) until something listens on 127.0.0.1:PORT.
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.05; done; echo "nothing listens on $1" >&2; exit 1; }

# start_nginx DIR PORT [LISTEN_OPTIONS] : one nginx worker on 127.0.0.1:PORT serving
# DIR/www/small.txt ("hello from nginx"), with its configuration, logs and temporary files in
# DIR, keep-alive without a request limit; LISTEN_OPTIONS (e.g. http2) go on its listen line.
# Appends its PID to the caller's PIDS array and waits until it listens.
start_nginx() {
  local dir="$1" port="$2" options="${3:-}" nginx
  mkdir -p "$dir/www"
  echo "hello from nginx" > "$dir/www/small.txt"
  cat > "$dir/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
error_log $dir/error.log;
pid $dir/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir; proxy_temp_path $dir; fastcgi_temp_path $dir;
  uwsgi_temp_path $dir; scgi_temp_path $dir;
  keepalive_requests 100000000;
  server { listen 127.0.0.1:$port $options; root $dir/www; }
}
CONF
  nginx=$(command -v nginx || echo /usr/sbin/nginx)
  "$nginx" -e stderr -c "$dir/nginx.conf" 2>/dev/null &
  PIDS+=($!)
  wait_port "$port"
}
