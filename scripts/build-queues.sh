#!/usr/bin/env bash
# Builds each example queue of examples/queues/*.c into target/queues/lib<name>.so, the shared
# libraries `queue.ring = "library"` loads (examples/queue-library.toml, docs/own-queue.md).
# Idempotent: rebuilds only what is older than its source. Needs a C compiler (cc).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/target/queues"
mkdir -p "$OUT"
for src in "$ROOT"/examples/queues/*.c; do
  lib="$OUT/lib$(basename "$src" .c).so"
  if [ ! -e "$lib" ] || [ "$src" -nt "$lib" ] || [ "$ROOT/examples/queues/msgbench_queue.h" -nt "$lib" ]; then
    cc -O2 -Wall -Wextra -shared -fPIC -o "$lib" "$src"
  fi
done
