#!/usr/bin/env bash
# Does `msgbench compare` cry wolf? The A/A check of docs/metrics.md §6.
#
# The same rpc scenario (built-in server, 200 µs of work per request, 1000 requests/s, 2 s) is
# run SETS+1 times one after another (default 21), once with 1 replicate and once with 3 each
# time; each set is then compared with the next: SETS comparisons per replicate count, every
# metric of each. An A/A comparison must give no "improved" and no "regressed" verdict. Then
# the same scenario with the service time doubled (400 µs, still 40 % of the server's thread) is
# compared with the first set: with
# 3 replicates, p50 must be found "regressed".
# Prints the verdict counts and exits 1 when a check fails. About 4 minutes on 2 CPUs.
source "$(dirname "$0")/common.sh"
SETS=${SETS:-20}
(cd "$ROOT" && cargo build --release --quiet)
machine
AA="$OUT/compare-aa"
rm -rf "$AA"
common=(--set system='"rpc"' --set 'sweep={}' --set pacing.mode='"rate"' --set pacing.per_sec=1000
        --set client.window=64 --duration 2s --warmup 300ms --quiet)
dir_of() { find "$1" -mindepth 2 -maxdepth 2 -type d | head -1; }
for i in $(seq 0 "$SETS"); do
  "$MSGBENCH" run "${common[@]}" --set 'rpc.ops.call.service="200us"' --replicates 3 --out "$AA/r3-$i" >/dev/null
  "$MSGBENCH" run "${common[@]}" --set 'rpc.ops.call.service="200us"' --replicates 1 --out "$AA/r1-$i" >/dev/null
  echo "set $i of $SETS written"
done
"$MSGBENCH" run "${common[@]}" --set 'rpc.ops.call.service="400us"' --replicates 3 --out "$AA/doubled" >/dev/null

verdicts() { grep -E '^\| [a-zA-Z0-9/.]+ \|' | grep -o -E 'improved|regressed|no significant change|no verdict' | sort | uniq -c | tr '\n' ' '; }
fail=0
for reps in 1 3; do
  false_alarms=0
  for i in $(seq 0 $((SETS - 1))); do
    out="$("$MSGBENCH" compare "$(dir_of "$AA/r$reps-$i")" "$(dir_of "$AA/r$reps-$((i + 1))")")"
    n=$(grep -c -E '\| (improved|regressed) \|' <<<"$out" || true)
    false_alarms=$((false_alarms + n))
    echo "A/A, $reps replicate(s), set $i vs $((i + 1)): $(verdicts <<<"$out")"
    [ "$n" -gt 0 ] && grep -E '\| (improved|regressed) \|' <<<"$out"
  done
  echo "A/A with $reps replicate(s): $false_alarms improved/regressed verdicts in $SETS comparisons (must be 0)"
  [ "$false_alarms" -eq 0 ] || fail=1
done
out="$("$MSGBENCH" compare "$(dir_of "$AA/r3-0")" "$(dir_of "$AA/doubled")")"
echo "$out" | grep -E '^\| (metric|delivered|p50|p99) '
if grep -q -E '^\| p50 .*\| regressed \|' <<<"$out"; then
  echo "service time doubled, 3 replicates: p50 regressed (found)"
else
  echo "service time doubled, 3 replicates: p50 NOT found regressed"; fail=1
fi
exit "$fail"
