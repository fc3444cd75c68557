#!/usr/bin/env bash
# Validates the Kubernetes manifest `msgbench kube` prints against the API schema of a current
# Kubernetes release, offline: kubernetes-validate (PyPI, which bundles the schemas) installed
# once into a project-local virtualenv (.tools/kube-venv). Then checks that the validator does
# refuse a broken manifest, so a check that passes means something.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.tools/kube-venv
VERSION=1.37.0
if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
  echo "scripts/check-manifest.sh: installing kubernetes-validate $VERSION into $VENV (PyPI)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "kubernetes-validate==$VERSION"
fi
# MSGBENCH_BIN: a msgbench already built (scripts/test.sh passes the tests' one).
BIN=${MSGBENCH_BIN:-}
if [ -z "$BIN" ]; then
  PROFILE=${MSGBENCH_PROFILE:-release}
  cargo build --profile "$PROFILE" --quiet
  BIN="target/$PROFILE/msgbench"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BIN" kube examples/sharded-rpc.toml --shards 4 \
  --set 'rpc.address="rpc.bench.svc:7000"' \
  --image registry.example/msgbench:0.1 --start-at +10m > "$tmp/job.yaml"
"$VENV/bin/kubernetes-validate" --strict --kubernetes-version "$VERSION" "$tmp/job.yaml"
# A Job whose completions is not a number must fail the same check.
sed 's/^  completions: 4$/  completions: four/' "$tmp/job.yaml" > "$tmp/broken.yaml"
grep -q 'completions: four' "$tmp/broken.yaml"
if "$VENV/bin/kubernetes-validate" --strict --kubernetes-version "$VERSION" "$tmp/broken.yaml" >"$tmp/broken.out" 2>&1; then
  echo "scripts/check-manifest.sh: a broken manifest passed validation:" >&2
  cat "$tmp/broken.out" >&2
  exit 1
fi
echo "scripts/check-manifest.sh: the generated manifest validates; a broken one is refused"
