#!/usr/bin/env bash
# gRPC server reflection against implementations msgbench did not write, both ways:
#
# 1. grpcurl (the grpc-go reflection client, built once from the Go module proxy into
#    target/peers/grpc-go) lists, describes and calls `msgbench serve grpc` with no .proto.
# 2. msgbench, with `reflection = true` and no .proto, checks and runs a scenario against a
#    server built with grpc-go (bench/peers/grpc-go-server: the standard health service and
#    grpc-go's own reflection): grpc.health.v1.Health/Check at 5000 calls/s for 2 s.
# Each step prints ok or what failed; the script exits non-zero if any failed.
source "$(dirname "$0")/common.sh"
(cd "$ROOT" && cargo build --release --quiet)
machine
PEERS="$ROOT/target/peers/grpc-go"
mkdir -p "$PEERS"
export GOPATH="$PEERS/gopath" GOFLAGS=-modcacherw
if [ ! -x "$PEERS/grpcurl" ]; then
  echo "building grpcurl from the Go module proxy into $PEERS (once)" >&2
  GOBIN="$PEERS" go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3 >/dev/null 2>&1
fi
if [ ! -x "$PEERS/grpc-go-server" ]; then
  echo "building bench/peers/grpc-go-server into $PEERS (once)" >&2
  (cd "$ROOT/bench/peers/grpc-go-server" && go build -o "$PEERS/grpc-go-server" .)
fi
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
failed=0
check() { # check NAME COMMAND...: runs it, prints ok or its output
  local name="$1"; shift
  local out
  if out=$("$@" 2>&1); then echo "ok      $name"; else echo "FAILED  $name"; echo "$out" | sed 's/^/        /'; failed=1; fi
}

P=$(port)
"$MSGBENCH" serve grpc --listen "127.0.0.1:$P" --for 60s >/dev/null 2>&1 & SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
sleep 0.5
G="$PEERS/grpcurl -plaintext"
A="127.0.0.1:$P"
check "grpcurl list: msgbench.Echo and msgbench.Feed" bash -c "$G $A list | tr '\n' ' ' | grep -q 'msgbench.Echo msgbench.Feed'"
check "grpcurl describe msgbench.Echo: Call, Chat, Upload" bash -c "$G $A describe msgbench.Echo | grep -q 'rpc Upload ( stream .msgbench.Message )'"
check "grpcurl calls msgbench.Echo/Call from the reflected descriptors" bash -c "$G -d '{\"seq\":\"5\",\"note\":\"hi\"}' $A msgbench.Echo/Call | grep -q '\"note\": \"hi\"'"
kill $SERVER; wait $SERVER 2>/dev/null || true

P=$(port)
"$PEERS/grpc-go-server" -listen "127.0.0.1:$P" -for 60s >/dev/null 2>&1 & SERVER=$!
sleep 0.5
SCENARIO=$(mktemp --suffix .toml)
cat > "$SCENARIO" <<TOML
name = "grpc-go-health"
system = "http"
[run]
duration = "2s"
warmup = "300ms"
[pacing]
mode = "rate"
per_sec = 5000
[client]
connections = 2
window = 8
[http]
url = "http://127.0.0.1:$P"
reflection = true
[http.requests.check]
grpc = "grpc.health.v1.Health/Check"
message = '{"service":""}'
TOML
check "msgbench check: grpc-go's reflection describes grpc.health.v1.Health/Check" "$MSGBENCH" check "$SCENARIO"
check "msgbench check: a method grpc-go's reflection does not list is refused" bash -c "$MSGBENCH check $SCENARIO --set 'http.requests.check.grpc=\"grpc.health.v1.Health/Nope\"' 2>&1 | grep -q 'it has: Check, Watch'"
for CLIENT in msgbench h2; do # both HTTP/2 clients (http.client)
  RESULT=$("$MSGBENCH" run --quiet --json --out "$OUT/$CLIENT" "$SCENARIO" --set "http.client=\"$CLIENT\"")
  check "msgbench run against grpc-go on http.client = $CLIENT: every call answered" python3 -c "
import json,sys; r=json.loads(sys.argv[1])['runs'][0]; c=r['counters']
print('delivered', c['delivered'], 'failed', c['failed'], 'p99', r['latency']['p99_ns'], 'ns')
sys.exit(0 if c['delivered'] >= 9000 and c['failed'] == 0 else 1)" "$RESULT"
  python3 -c "
import json,sys; r=json.loads(sys.argv[1])['runs'][0]; c=r['counters']; l=r['latency']
print(f\"        grpc-go health checks ($CLIENT): {c['delivered']} delivered, {c['failed']} failed, p50 {l['p50_ns']/1e3:.0f} µs, p99 {l['p99_ns']/1e3:.0f} µs\")" "$RESULT"
done
rm -f "$SCENARIO"
exit $failed
