#!/usr/bin/env bash
# Every test: installs the Debian packages the Redis tests need (scripts/setup.sh), then runs
# the whole workspace's tests in release mode (timing-sensitive tests need optimized code),
# then validates the Kubernetes manifest `msgbench kube` prints (scripts/check-manifest.sh), then
# opens a generated report.html in headless Chromium (scripts/browser-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --workspace --release
bash scripts/check-manifest.sh
bash scripts/browser-check.sh
