#!/usr/bin/env bash
# Opens a freshly generated report.html in headless Chromium (Debian's, installed by
# scripts/setup.sh) and fails on any console message of level error/warning, on a page
# without its charts, or when a chart file is missing; saves a screenshot to look at:
#   target/browser-check/report.png
# Run by scripts/test.sh (and so by .ci/run). Usage: bash scripts/browser-check.sh [RESULT_DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$ROOT/target/browser-check"
BROWSER=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$BROWSER" ]; then
  echo "browser-check: chromium is missing; run: bash scripts/setup.sh" >&2
  exit 1
fi
mkdir -p "$OUT"
if [ $# -ge 1 ]; then
  DIR="$1"
else
  # MSGBENCH_BIN: a msgbench already built (scripts/test.sh passes the tests' one).
  BIN=${MSGBENCH_BIN:-}
  if [ -z "$BIN" ]; then
    PROFILE=${MSGBENCH_PROFILE:-release}
    (cd "$ROOT" && cargo build --profile "$PROFILE" --quiet)
    BIN="$ROOT/target/$PROFILE/msgbench"
  fi
  rm -rf "$OUT/results"
  # A small real sweep with two operation classes: every chart kind, the knee and advice.
  "$BIN" run "$ROOT/examples/pipeline-depth.toml" --duration 1200ms \
    --warmup 200ms --slo "p99 < 4ms" --quiet --out "$OUT/results"
  DIR=$(ls -d "$OUT"/results/*/* | head -1)
fi
HTML="$DIR/report.html"
[ -f "$HTML" ] || { echo "browser-check: no $HTML" >&2; exit 1; }
PROFILE=$(mktemp -d)
trap 'rm -rf "$PROFILE"' EXIT
flags=(--headless --no-sandbox --disable-gpu --disable-background-networking --disable-extensions
       --disable-sync --no-first-run --no-default-browser-check --mute-audio --hide-scrollbars
       --user-data-dir="$PROFILE" --enable-logging=stderr --v=0)
timeout 120 "$BROWSER" "${flags[@]}" --dump-dom "file://$HTML" > "$OUT/dom.html" 2> "$OUT/console.log" || true
timeout 120 "$BROWSER" "${flags[@]}" --window-size=1280,5200 --screenshot="$OUT/report.png" "file://$HTML" \
  >/dev/null 2>> "$OUT/console.log" || true
fail=0
if grep -E "CONSOLE|Uncaught|Failed to load" "$OUT/console.log" | grep -v "^$" > "$OUT/console-errors.log"; then
  echo "browser-check: the page logged to the console:" >&2; cat "$OUT/console-errors.log" >&2; fail=1
fi
svgs=$(ls "$DIR"/*.svg | wc -l)
rendered=$(grep -o 'data-chart="[a-z0-9-]*"' "$OUT/dom.html" | sort -u | wc -l)
figures=$(grep -o '<figure id=' "$OUT/dom.html" | wc -l)
if [ "$svgs" -lt 5 ] || [ "$rendered" -ne "$svgs" ] || [ "$figures" -ne "$svgs" ]; then
  echo "browser-check: $svgs chart files, $rendered charts in the rendered page, $figures figures" >&2; fail=1
fi
if [ ! -s "$OUT/report.png" ]; then
  echo "browser-check: no screenshot was written" >&2; fail=1
fi
[ $fail -eq 0 ] && echo "browser-check: $rendered charts rendered, no console errors; screenshot $OUT/report.png"
exit $fail
