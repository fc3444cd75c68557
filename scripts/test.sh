#!/usr/bin/env bash
# Every test: installs the Debian packages the Redis tests need (scripts/setup.sh), then runs
# the whole workspace's tests optimized (timing-sensitive tests need optimized code),
# then validates the Kubernetes manifest `msgbench kube` prints (scripts/check-manifest.sh), then
# opens a generated report.html in headless Chromium (scripts/browser-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The `ci` profile (Cargo.toml): optimized, without the release profile's fat LTO, which made
# linking the test binaries two thirds of the suite's time. The scripts after it use its binary.
export MSGBENCH_PROFILE=ci
cargo test --workspace --profile ci
# The binary the tests just built: `cargo build` would build it again (without the tests'
# dev-dependency features the dependencies differ, and the workspace's crates with them: ~2 min).
export MSGBENCH_BIN="$PWD/target/ci/msgbench"
bash scripts/check-manifest.sh
bash scripts/browser-check.sh
