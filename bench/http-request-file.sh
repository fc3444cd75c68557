#!/usr/bin/env bash
# HTTP requests that vary (issue 48, item 2), their cost on the driver: the same open-loop run
# against `msgbench serve http` (2 threads, on a free loopback port) three ways, alternating,
# ROUNDS rounds (default 5):
#   fixed     — one request, `GET /p/0`, rendered once when the scenario is checked
#   file      — a request file of 1000 distinct paths (vegeta's targets), cycled over every
#               connection (each request copied from the file's one buffer)
#   template  — `GET /p/{key}?n={seq}` with a header `X-Sent: {intended_ns}` and keys drawn
#               Zipf over 1000 (filled in per request)
# at RATE requests/s (default 50000) over 4 connections, window 16, for 3 s. Prints the median
# driver CPU per request of each (the client threads' CPU from /proc, over the requests sent)
# and the ratios file / fixed and template / fixed; a fixed run again beside them is the A/A
# control that shows this machine's noise.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-5}
RATE=${RATE:-50000}
build_all
machine
WORK=$(mktemp -d)
PORT=$(free_port)
"$MSGBENCH" serve http --listen "127.0.0.1:$PORT" --threads 2 >/dev/null 2>&1 &
SERVER_PID=$!
trap 'stop_server; rm -rf "$WORK"' EXIT
wait_port "$PORT"
for i in $(seq 0 999); do printf 'GET http://127.0.0.1:%s/p/%s\n\n' "$PORT" "$i"; done > "$WORK/targets.txt"
cat > "$WORK/base.toml" <<TOML
system = "http"
[run]
duration = "3s"
warmup = "500ms"
[pacing]
mode = "rate"
per_sec = $RATE
[client]
connections = 4
window = 16
[http]
url = "http://127.0.0.1:$PORT"
keys = 1000
key_pattern = "zipf"
TOML
{ cat "$WORK/base.toml"; printf '[http.requests.fixed]\npath = "/p/0"\n'; } > "$WORK/fixed.toml"
{ cat "$WORK/base.toml"; printf '[http.requests.file]\nfile = "%s"\n' "$WORK/targets.txt"; } > "$WORK/file.toml"
{ cat "$WORK/base.toml"; printf '[http.requests.t]\npath = "/p/{key}?n={seq}"\nheaders = { X-Sent = "{intended_ns}" }\n'; } > "$WORK/template.toml"
per_request() {
  "$MSGBENCH" run --quiet --json --out "$WORK/out" "$WORK/$1.toml" |
    python3 -c "import json,sys; r=json.load(sys.stdin)['runs'][0]; c=r['counters']; assert c['delivered']==c['sent'], c; print(r['cpu']['driver_cpu_s']/c['sent']*1e9)"
}
fixed=(); file=(); template=(); again=()
for round in $(seq "$ROUNDS"); do
  fixed+=("$(per_request fixed)")
  file+=("$(per_request file)")
  template+=("$(per_request template)")
  again+=("$(per_request fixed)")
  printf 'round %s: ns of driver CPU per request: fixed %.0f  file %.0f  template %.0f  fixed again %.0f\n' \
    "$round" "${fixed[-1]}" "${file[-1]}" "${template[-1]}" "${again[-1]}"
done
python3 - "$(median "${fixed[@]}")" "$(median "${file[@]}")" "$(median "${template[@]}")" "$(median "${again[@]}")" "$RATE" <<'PY'
import sys
fixed, file, template, again, rate = map(float, sys.argv[1:])
print(f"at {rate:.0f}/s, median driver CPU per request: fixed {fixed:.0f} ns, file {file:.0f} ns, template {template:.0f} ns")
print(f"file / fixed = {file/fixed:.3f}   template / fixed = {template/fixed:.3f}   (A/A: fixed again / fixed = {again/fixed:.3f})")
PY
