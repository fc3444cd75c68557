#!/usr/bin/env bash
# The flake detector: runs the whole test suite N times (default 5) in a fresh clone of this
# repository's HEAD, and lists every test that failed in any run, with its message.
#
#   bash bench/flakes.sh [N] [--hog]
#
# --hog runs a CPU hog (one busy process per core) beside every run: a test whose margins
# hold only on a quiet machine fails there.
#
# The clone is built once (the first run pays for it); each run is `cargo test --workspace
# --profile ci --no-fail-fast`, the README's test command without its manifest and browser steps
# (it runs scripts/setup.sh in the clone first). Output: one line per run, then
# every failing test with the runs it failed in and the first lines of its message. Exit 1
# when any test failed. On 2 cores, a run takes ~10 minutes: N=5 is an hour.
set -euo pipefail
N=5
HOG=0
for arg in "$@"; do
  case "$arg" in
    --hog) HOG=1 ;;
    [0-9]*) N="$arg" ;;
    *) echo "usage: bash bench/flakes.sh [N] [--hog]" >&2; exit 2 ;;
  esac
done
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d /tmp/msgbench-flakes.XXXXXX)"
git clone --quiet "$ROOT" "$WORK/clone"
# The build is shared with the working tree's target folder when there is one: a fresh
# clone's sources, an already-warm dependency build.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
cd "$WORK/clone"
# What the README's test command installs first: Debian packages (present after one run),
# the Node feed's `ws` into this clone, Kafka's jars into this clone's target/kafka.
bash scripts/setup.sh >"$WORK/setup.log" 2>&1 || { echo "scripts/setup.sh failed: $WORK/setup.log" >&2; exit 1; }
hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; hogs=(); }
trap stop_hogs EXIT
for run in $(seq 1 "$N"); do
  if [ "$HOG" = 1 ]; then
    for _ in $(seq 1 "$(nproc)"); do
      (while :; do :; done) &
      hogs+=($!)
    done
  fi
  log="$WORK/run-$run.log"
  start=$(date +%s)
  if MSGBENCH_PROFILE=ci cargo test --workspace --profile ci --no-fail-fast >"$log" 2>&1; then
    status=green
  else
    status=FAILED
  fi
  stop_hogs
  # (A run that did not compile has no such line: 0, not the end of this script.)
  passed=$({ grep -Eo '[0-9]+ passed' "$log" || true; } | awk '{s+=$1} END {print s+0}')
  failed=$({ grep -Eo '[0-9]+ failed' "$log" || true; } | awk '{s+=$1} END {print s+0}')
  echo "run $run/$N: $status, $passed passed, $failed failed, $(( $(date +%s) - start )) s (log: $log)"
done
# Every failing test: `test NAME ... FAILED` lines, and the message cargo prints under
# `---- NAME stdout ----`.
python3 - "$WORK" "$N" <<'EOF'
import collections, glob, re, sys
work, n = sys.argv[1], int(sys.argv[2])
failed = collections.defaultdict(list)
message = {}
for k in range(1, n + 1):
    text = open(f"{work}/run-{k}.log", errors="replace").read()
    for name in re.findall(r"^test (\S+) \.\.\. FAILED$", text, re.M):
        failed[name].append(k)
        m = re.search(r"^---- " + re.escape(name) + r" stdout ----\n(.*?)(?=^---- |^failures:|\Z)", text, re.M | re.S)
        if m and name not in message:
            message[name] = "\n".join(m.group(1).strip().splitlines()[:6])
if not failed:
    print(f"no test failed in {n} runs")
    sys.exit(0)
for name, runs in sorted(failed.items()):
    print(f"\n{name}: failed in run(s) {', '.join(map(str, runs))} of {n}")
    print("    " + message.get(name, "(no message)").replace("\n", "\n    "))
sys.exit(1)
EOF
