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

# median VALUES... : the median of the numbers given.
median() {
  python3 -c "import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"
}

machine() {
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr), clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
}
