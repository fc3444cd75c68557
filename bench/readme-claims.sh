#!/usr/bin/env bash
# The README's figures that depend on the host, measured here so that readers can check them
# on theirs: ROUNDS rounds (default 3) of
#   - examples/pacing.toml: share of attempts skipped at each interval (0, 1, 2, 5 ms);
#   - examples/browser-ticks.toml: ticks/s the headless Chromium page processed (page none,
#     dom, frame) next to the native client (needs scripts/setup.sh for Chromium);
#   - examples/wait-strategy-ws-rpc.toml: caller + socket CPU seconds per strategy, and park's
#     CPU over busy-spin's.
# Prints each figure's median and its range over the rounds. About 4 minutes on 2 CPUs.
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}
bash "$ROOT/scripts/setup.sh"
(cd "$ROOT" && cargo build --release --quiet)
machine
python3 - "$MSGBENCH" "$OUT/readme-claims" "$ROOT/examples" "$ROUNDS" <<'PY'
import json, statistics, subprocess, sys
from collections import defaultdict
msgbench, out, examples, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def runs(example, *extra):
    text = subprocess.run([msgbench, "run", f"{examples}/{example}", "--quiet", "--json", "--out", out, *extra],
                          capture_output=True, text=True, check=True).stdout
    return json.loads(text)["runs"]

def show(label, values, fmt):
    values = sorted(values)
    print(f"  {label:<28} median {fmt(statistics.median(values))}  (range {fmt(values[0])} … {fmt(values[-1])})")

skipped, browser, cpu = defaultdict(list), defaultdict(list), defaultdict(list)
for _ in range(rounds):
    for r in runs("pacing.toml"):
        c = r["counters"]
        skipped[r["params"][0]["value"]].append(100 * c["skipped"] / max(c["attempted"], 1))
    for r in runs("browser-ticks.toml"):
        page = r["params"][0]["value"]
        for s in r["streams"]:
            browser[f"page={page} {s['kind']}"].append(s["counters"]["delivered"] / r["duration_s"])
    for r in runs("wait-strategy-ws-rpc.toml", "--replicates", "1"):
        cpu[r["params"][0]["value"]].append(r["cpu"]["driver_cpu_s"])

print("examples/pacing.toml, skipped share of attempts (when_full = skip):")
for every, v in skipped.items():
    show(f"every={every}", v, lambda x: f"{x:.1f} %")
print("examples/browser-ticks.toml, ticks/s processed at 100k/s offered:")
for client, v in browser.items():
    show(client, v, lambda x: f"{x/1e3:.1f}k/s")
print("examples/wait-strategy-ws-rpc.toml, caller + socket CPU over the 3 s window:")
for wait, v in cpu.items():
    show(wait, v, lambda x: f"{x:.2f} s")
ratios = [p / b for p, b in zip(cpu["park"], cpu["busy-spin"])]
show("park / busy-spin CPU", ratios, lambda x: f"{x:.2f}")
PY
