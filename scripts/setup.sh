#!/usr/bin/env bash
# Installs what the tests and benchmarks need beyond a Rust toolchain, from Debian's packages:
# redis-server and redis-tools (redis-benchmark), chromium for the browser tick clients and the
# report's browser check, nginx (nginx-light) for the http system's tests and wrk, the HTTP
# peer of the benchmarks and of the coordinated-omission test. Idempotent: does nothing when
# present.
# msgbench never relies on a running Redis: tests and examples start their own on loopback.
set -euo pipefail
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
command -v chromium >/dev/null || need+=(chromium)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v wrk >/dev/null || need+=(wrk)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null; then
  SUDO=(sudo)
else
  echo "scripts/setup.sh: need ${need[*]} from apt, but this is not root and sudo is missing;" >&2
  echo "install them as root: apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "scripts/setup.sh: installing ${need[*]} (Debian packages)" >&2
export DEBIAN_FRONTEND=noninteractive
# Packages such as nginx and redis-server start a system service when installed; the tests
# start their own servers on free ports, so no service may start (policy-rc.d: 101 = refuse).
POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null
  "${SUDO[@]}" chmod +x "$POLICY"
  trap '"${SUDO[@]}" rm -f "$POLICY"' EXIT
fi
if ! "${SUDO[@]}" apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; then
  "${SUDO[@]}" apt-get update >/dev/null
  "${SUDO[@]}" apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
fi
