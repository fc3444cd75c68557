#!/usr/bin/env bash
# Is busy-spin's difference from park real, over a WebSocket? The question of
# examples/wait-strategy-ws-rpc-closed.toml (closed loop, as the report measured it) and
# examples/wait-strategy-ws-rpc.toml (open loop, 5000 calls/s), each side 5 replicates, then
# `msgbench compare` (Welch's t per metric, Bonferroni-corrected; 5 % noise threshold) on the
# two result directories. Prints each comparison's table. About 3 minutes on 2 CPUs.
source "$(dirname "$0")/common.sh"
(cd "$ROOT" && cargo build --release --quiet)
machine
for example in wait-strategy-ws-rpc-closed wait-strategy-ws-rpc; do
    dirs=()
    for wait in busy-spin park; do
        dir="$OUT/wait-strategy-compare/$example/$wait"
        rm -rf "$dir"
        "$MSGBENCH" run "$ROOT/examples/$example.toml" --quiet --out "$dir" \
            --set 'sweep={}' --set "ws_rpc.wait=$wait" --replicates 5 >/dev/null
        dirs+=("$dir/$example/latest")
    done
    echo "== examples/$example.toml: A = busy-spin, B = park (5 replicates each)"
    "$MSGBENCH" compare "${dirs[@]}" | sed -n '/^| metric/,/^$/p'
done
