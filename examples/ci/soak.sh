#!/usr/bin/env bash
# A CI soak job's steps: loadrepro starts the engine itself (ENGINE_CMD, with {port} where the port goes; by default
# the simulated engine), waits for its /health, soaks it for DURATION seconds, and exits with loadrepro's code (0
# pass, 1 the engine failed, 2 usage, 3 loadrepro's own failure). The run directory OUT holds report.json/md/html,
# junit.xml and the engine's log (engine.log): keep it as an artifact whatever the outcome. Reports are rewritten
# every minute, so a job killed by its timeout still leaves one.
set -euo pipefail

LOADREPRO=${LOADREPRO:-loadrepro}
OUT=${OUT:-soak-run}
DURATION=${DURATION:-600}
ENGINE_CMD=${ENGINE_CMD:-"$LOADREPRO sim --scenario healthy --port {port}"}

set +e
$LOADREPRO run --profile soak --engine-cmd "$ENGINE_CMD" --out "$OUT" --quiet \
    --set "load.duration_s=$DURATION" "$@"
code=$?
set -e
echo "loadrepro exited $code; reports in $OUT"
exit "$code"
