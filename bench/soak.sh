#!/usr/bin/env bash
# Soak: does memory stay flat over an hour? Two standalone servers — `msgbench serve rpc` and
# `msgbench serve ticks` — each loaded for SOAK_MINUTES (default 60) by `msgbench run`, one
# measured run per minute (rpc at 100k requests/s, ticks at 100k messages/s), both soaks side
# by side. The resident memory (VmRSS) of all four processes is sampled once a minute into
# soak-rss.csv; the pass is a flat line after warm-up: RSS at 60 min within 10 % (+8 MiB) of
# RSS at 5 min for each server. Each minute is its own run, so the clients' results are a
# sweep over time (target/bench-results/soak-*/): a rate that sagged, a run that stopped early.
#
#   bash bench/soak.sh                 # 60 minutes
#   SOAK_MINUTES=10 bash bench/soak.sh # a shorter look
#
# Loopback only, free ports, every process started here is stopped here by PID.
source "$(dirname "$0")/common.sh"
MINUTES="${SOAK_MINUTES:-60}"
build_all
machine
DIR="$OUT/soak-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$DIR"
CSV="$DIR/soak-rss.csv"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

RPC_PORT=$(free_port)
TICK_PORT=$(free_port)
LIMIT="$((MINUTES + 2))m"
"$MSGBENCH" serve rpc --listen "127.0.0.1:$RPC_PORT" --for "$LIMIT" >"$DIR/serve-rpc.log" 2>&1 &
RPC_SERVER=$!
"$MSGBENCH" serve ticks --listen "127.0.0.1:$TICK_PORT" --rate 100000 --for "$LIMIT" \
  >"$DIR/serve-ticks.log" 2>&1 &
TICK_SERVER=$!
cleanup() {
  for pid in ${RPC_CLIENT:-} ${TICK_CLIENT:-} $RPC_SERVER $TICK_SERVER; do
    kill "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT
sleep 1

"$MSGBENCH" run --quiet --out "$DIR" --replicates "$MINUTES" --duration 60s --warmup 0 \
  --set 'name="soak-rpc"' --set 'system="rpc"' --set "rpc.address=\"127.0.0.1:$RPC_PORT\"" \
  --set 'pacing.mode="rate"' --set pacing.per_sec=100000 --set client.window=64 --set 'sweep={}' \
  >"$DIR/run-rpc.log" 2>&1 &
RPC_CLIENT=$!
"$MSGBENCH" run --quiet --out "$DIR" --replicates "$MINUTES" --duration 60s --warmup 0 \
  --set 'name="soak-ticks"' --set 'system="ticks"' \
  --set "ticks.address=\"ws://127.0.0.1:$TICK_PORT/ticks\"" --set 'sweep={}' \
  >"$DIR/run-ticks.log" 2>&1 &
TICK_CLIENT=$!

echo "minute,rpc_server_kb,rpc_client_kb,ticks_server_kb,ticks_client_kb" >"$CSV"
for minute in $(seq 0 "$MINUTES"); do
  echo "$minute,$(rss_kb $RPC_SERVER),$(rss_kb $RPC_CLIENT),$(rss_kb $TICK_SERVER),$(rss_kb $TICK_CLIENT)" | tee -a "$CSV"
  [ "$minute" -lt "$MINUTES" ] && sleep 60
done
wait "$RPC_CLIENT" || echo "rpc client exited with $?"
wait "$TICK_CLIENT" || echo "ticks client exited with $?"

python3 - "$CSV" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
at = lambda m: next((r for r in rows if int(r["minute"]) >= m), rows[-1])
early, last = at(min(5, len(rows) - 1)), rows[-1]
ok = True
for who in ["rpc_server", "ticks_server", "rpc_client", "ticks_client"]:
    a, b = int(early[who + "_kb"]), int(last[who + "_kb"])
    flat = b <= a * 1.10 + 8192
    if who.endswith("server"):
        ok &= flat
    print(f"{who:>13}: RSS {a / 1024:7.1f} MiB at minute {early['minute']}, "
          f"{b / 1024:7.1f} MiB at minute {last['minute']}  {'flat' if flat else 'GREW'}")
print("soak:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
EOF
