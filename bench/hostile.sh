#!/usr/bin/env bash
# Two parts.
# 1. The servers: hostile clients against each built-in server (`msgbench serve
#    rpc|ws-rpc|ticks`): random bytes, truncated frames, oversized length fields, maximal service
#    times, clients that never read, slowloris heads, 10 000 idle connections, connection churn.
#    For each, a well-behaved `msgbench run` beside the attack: its p99 against its quiet figure
#    (pass: within 2×, or within 100 µs of it), and the server's peak RSS against its cap in
#    docs/limits.md. About four minutes.
# 2. The clients and the files (issue 43's findings): each hostile peer or file is written in a
#    test; a cell per finding runs its tests in a release build and prints the bound they hold
#    it to, pass or FAIL, and how long they took. About five minutes once built.
# Loopback only; every process it starts it stops.
#
#   bash bench/hostile.sh
#   MSGBENCH_HOSTILE_ONLY=ws-rpc:slowloris bash bench/hostile.sh   # one cell (or one server)
#   MSGBENCH_HOSTILE_ONLY=findings bash bench/hostile.sh           # part 2 only
source "$(dirname "$0")/common.sh"
build_all
machine
# 10 000 idle connections need as many descriptors in this process (the servers raise their own).
ulimit -n "$(ulimit -Hn)"
cd "$ROOT"
if [ "${MSGBENCH_HOSTILE_ONLY:-}" != findings ]; then
  cargo test --release --quiet -p msgbench --test hostile_matrix -- --ignored --nocapture 2>&1 |
    grep -v -E '^(running|test |$)'
fi
if [ -n "${MSGBENCH_HOSTILE_ONLY:-}" ] && [ "${MSGBENCH_HOSTILE_ONLY}" != findings ]; then
  exit 0
fi

# cell FINDING BOUND PACKAGE TARGET TEST... : runs the named tests of one test target
# (`--lib` or `--test NAME`) in release and prints one row.
failed=0
cell() {
  local finding="$1" bound="$2" package="$3" target="$4"
  shift 4
  local log t0 t1 result=pass
  log=$(mktemp)
  t0=$(date +%s.%N)
  for t in "$@"; do
    # shellcheck disable=SC2086
    if ! cargo test --release --quiet -p "$package" $target -- "$t" --test-threads=1 >"$log" 2>&1 ||
      ! grep -q "test result: ok. [1-9]" "$log"; then
      result=FAIL
      tail -20 "$log" >&2
    fi
  done
  t1=$(date +%s.%N)
  [ "$result" = pass ] || failed=1
  printf '| %s | %s | %s | %.1f s |\n' "$finding" "$bound" "$result" "$(python3 -c "print($t1-$t0)")"
  rm -f "$log"
}
echo
echo "| finding (issue 43) | bound held | result | time |"
echo "|---|---|---|---|"
cell "1 merge writes where a shard says" "run_id ../x, /abs/x, a/../../x refused; the tree outside --out unchanged" \
  msgbench "--test distributed" four_shards_merge_exactly_into_what_one_process_offers
cell "2 HTTP/2 SETTINGS amplification" "one SETTINGS frame moves the windows once; a flood ends at the unread-output bound" \
  msgbench-engine --lib a_settings_frame_of_many_entries_moves_the_windows_once_and_a_flood_is_bounded
cell "2 HTTP/2 trickle and flood, both clients" "run ends by duration + drain + 2 s (opening 5 s + 2 s); Ctrl-C within 1 s" \
  msgbench-engine "--test http2_runs" a_server_that_trickles_or_floods_holds_neither_client
cell "3 feed frames that make no message" "run ends by duration + drain + 2 s; Ctrl-C within 1 s" \
  msgbench-engine "--test ticks_runs" a_flood_of_frames_that_make_no_message ctrl_c_ends_a_run_within_a_second_while_a_server_floods
cell "4 broker opening that trickles" "pubsub.open_timeout without progress; Ctrl-C within 1 s on each of six brokers" \
  msgbench-engine "--test pubsub_runs" an_opening_that_trickles_ends_at_its_deadline
cell "4 Ctrl-C in a broker opening" "exit 130 at once, nothing written" \
  msgbench "--test cli" ctrl_c_during_a_broker_opening_exits_130
cell "5 Redis replies without end" "redis.max_reply (64 MiB), nesting 64, scanned once" \
  msgbench-engine --lib a_reply_without_end_pushes_without_a_reply_and_deep_nesting_are_bounded a_scan_goes_on_where_it_stopped
cell "5 HTTP/1.1 heads and chunks without end" "interim heads and 4 KiB chunk lines bounded, walked once" \
  msgbench-engine --lib endless_interim_responses_and_chunk_lines_are_bounded a_chunked_body_is_walked_once
cell "5 the same from real peers" "one malformed reply fails the run with the decoder's reason" \
  msgbench-engine "--test rpc_runs" a_redis_reply_that_never_ends an_http_response_that_never_ends
cell "6 sequence 2^64-1 from a feed" "a jump past 2^20 + 100 M/s is a protocol fault, not counts" \
  msgbench-engine "--test ticks_runs" a_sequence_number_no_stream_could_reach
cell "7 merge arithmetic, histograms, .hlog" "counts <= 2^50, totals = counters, truncated .hlog refused" \
  msgbench-engine "--test fuzz_wires" run_results_with_edge_numbers_merge_or_are_refused hlog_interval_logs_never_panic
cell "7 merge of shards with other settings" "refused, the difference named" \
  msgbench-engine --lib merge
cell "8 kube collect archive bombs" "100 000 entries, 50x the archive, files only" \
  msgbench "--test distributed" kube_collect_bounds_what_an_archive_unpacks_to
cell "9 serve http lengths" "overflowing or conflicting Content-Length: 400, closed" \
  msgbench-engine --lib overflowing_or_conflicting_lengths_are_refused
cell "10 Kafka offsets near 2^63" "a protocol fault, not a wrapped sum" \
  msgbench-engine --lib offsets_near_two_to_the_63_are_refused_not_wrapped
cell "11 reports at scale" "2000 points a line; impossible windows invalid" \
  msgbench-report --lib a_long_line_is_drawn_from_its_lows_and_highs_in_order
cell "11 impossible windows" "a window no run can have makes the run invalid" \
  msgbench-model --lib a_window_no_run_can_have_makes_the_run_invalid
cell "11 messages that mislead" "Kafka's advice within 1024; a server breaking HTTP/2's rules told so" \
  msgbench-engine --lib a_topic_of_other_partitions_is_told_what_to_set_within_the_limit
echo
echo "the decoders under fuzzing: bash bench/fuzz.sh; the one-day merge: bash bench/merge-day.sh"
exit "$failed"
