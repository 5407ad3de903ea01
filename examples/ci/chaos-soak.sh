#!/usr/bin/env bash
# A CI chaos soak: loadrepro starts the engine itself (ENGINE_CMD, with {port} where the port goes; by default the
# simulated engine), soaks it for DURATION seconds, kills it at one third (started again KILL_DOWN seconds later,
# its log continuing in engine.log) and cancels ABORTS streams in flight at two thirds, and judges whether the
# engine was back within RECOVER seconds of each. Exits with loadrepro's code (0 pass, 1 the engine failed, 2 usage,
# 3 loadrepro's own failure); keep OUT (report.json/md/html with the chaos table, junit.xml, engine.log) as an
# artifact whatever the outcome.
set -euo pipefail

LOADREPRO=${LOADREPRO:-loadrepro}
OUT=${OUT:-chaos-soak-run}
DURATION=${DURATION:-600}
KILL_DOWN=${KILL_DOWN:-5}
ABORTS=${ABORTS:-8}
RECOVER=${RECOVER:-120}
ENGINE_CMD=${ENGINE_CMD:-}

kill_at=$((DURATION / 3))
abort_at=$((2 * DURATION / 3))
events="[{at_s=$kill_at, action=\"kill\", duration_s=$KILL_DOWN, recover_within_s=$RECOVER},"
events+=" {at_s=$abort_at, action=\"abort_burst\", count=$ABORTS, recover_within_s=$RECOVER}]"
engine=()
if [ -n "$ENGINE_CMD" ]; then
    engine=(--engine-cmd "$ENGINE_CMD")
fi

set +e
$LOADREPRO run --profile soak "${engine[@]}" --out "$OUT" --quiet \
    --set "load.duration_s=$DURATION" --set "chaos.events=$events" "$@"
code=$?
set -e
echo "loadrepro exited $code; reports in $OUT"
exit "$code"
