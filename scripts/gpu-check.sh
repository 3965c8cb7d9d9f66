#!/usr/bin/env bash
# `make gpu-check`: the GPU path measured on one CUDA GPU, one JSON summary in
# benchmarks/results/gpu_check.json (benchmarks/gpu_check.py says what runs; about 8 minutes
# on an H100). Where torch sees no CUDA device (CI, CPU machines) it says so in one line and
# exits 0, having run and written nothing.
#
# Nothing is installed. Where ip/tc/nft/iperf3 are missing, DDPNET_DEBS=DIR names .debs to
# unpack into a prefix (scripts/prefix-debs.sh); DDPNET_WHEELS=DIR names wheels of ddpnet's
# pure-Python dependencies to put on PYTHONPATH (pip --target, no index). Extra arguments go to
# benchmarks/gpu_check.py (e.g. --budget 600, --rehearse-on-cpu).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
rehearse=0; for a in "$@"; do [ "$a" = --rehearse-on-cpu ] && rehearse=1; done
if [ $rehearse = 0 ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu-check: skipped: torch sees no CUDA device on $(hostname) (nothing run, nothing written)"
  exit 0
fi
PREFIX=${DDPNET_PREFIX:-/tmp/ddpnet-prefix}
if [ -n "${DDPNET_DEBS:-}" ]; then
  exports=$(bash scripts/prefix-debs.sh unpack "$DDPNET_DEBS" "$PREFIX") || exit 1
  eval "$exports"
fi
export PYTHONPATH=$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -n "${DDPNET_WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --target "$PREFIX/site" "$DDPNET_WHEELS"/*.whl || exit 1
  export PYTHONPATH=$PREFIX/site:$PYTHONPATH
fi
for t in ip tc nft iperf3; do
  command -v "$t" >/dev/null || { echo "gpu-check: $t missing" >&2
    echo "hint: install iproute2, nftables and iperf3, or set DDPNET_DEBS=DIR (scripts/prefix-debs.sh download DIR on a machine with apt)" >&2; exit 1; }
done
# the driver tears its lab down and kills each step's process group itself; this trap covers
# a kill of the driver (SIGTERM/SIGINT from make or a shell)
child=
cleanup() {
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child" 2>/dev/null
  "$PY" -m ddpnet lab down --name gck >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$PY" benchmarks/gpu_check.py "$@" &
child=$!
wait "$child"; rc=$?; child=
exit $rc
