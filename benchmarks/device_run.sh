#!/usr/bin/env bash
# Runs `python -m benchmarks.scale_out` on the offline benchmark machine (16 cores, Python 3.12,
# no package index), as one command of about 6 minutes: installs the wheels carried in .whl/
# (made by benchmarks/device_wheels.sh) into a private folder, raises the descriptor limit to
# the hard limit, records the machine, and runs the benchmark with its output teed into $OUT.
#
#   bash benchmarks/device_run.sh [scale_out options]      # e.g. --quick for a smoke run
#
# On the device machine (the `run` tool): command `bash benchmarks/device_run.sh`, carry
# [".whl"], timeout_s 420. What comes back: $OUT/machine.txt, $OUT/scale_out.log (every
# progress line; a "figures" line after each part) and $OUT/scale_out.json (the last
# line: every figure as JSON). The benchmark stops starting parts after --budget seconds
# (300 by default); LIMIT (default 345 s) is a hard stop by SIGTERM, on which the benchmark
# still prints the figures it has. PYTHON (python3) and SITE (/tmp/site) may be overridden,
# e.g. to try the script here with another interpreter.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/scale_out-out}
PYTHON=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
mkdir -p "$OUT"
rm -rf "$SITE"
"$PYTHON" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
  --target "$SITE" .whl/*.whl || exit 1
export PYTHONPATH="$SITE:$PWD" PATH="$SITE/bin:$PATH" PYTHONUNBUFFERED=1
ulimit -n "$(ulimit -Hn)"
{
  date -u
  echo "$(nproc) CPUs; descriptors $(ulimit -n); $("$PYTHON" --version)"
  grep -m1 "model name" /proc/cpuinfo
  free -g | head -2
  uname -srm
  nats-server --version
  cat /proc/loadavg
} 2>&1 | tee "$OUT/machine.txt"
timeout -s TERM "${LIMIT:-345}" "$PYTHON" -m benchmarks.scale_out "$@" 2>&1 | tee "$OUT/scale_out.log"
status=${PIPESTATUS[0]}
tail -n 1 "$OUT/scale_out.log" > "$OUT/scale_out.json"
exit "$status"
