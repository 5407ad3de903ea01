#!/usr/bin/env bash
# A nightly regression gate: run the same profile against tonight's engine and compare it with the last good
# night's run (BASELINE, a run directory kept as an artifact). loadrepro starts the engine itself (ENGINE_CMD, with
# {port} where the port goes; by default the simulated engine of the profile). Exit 1 when tonight's run is
# significantly slower (TTFT p50/p95, ITL, decode speed, SLO attainment) by more than TOLERANCE, or a rule fails
# that did not fail before; exit 0 otherwise, and tonight's run becomes the baseline to keep (NEXT_BASELINE).
# Without a baseline, tonight's run is judged alone and becomes the first one.
set -euo pipefail

LOADREPRO=${LOADREPRO:-loadrepro}
OUT=${OUT:-nightly-run}
BASELINE=${BASELINE:-baseline-run}
NEXT_BASELINE=${NEXT_BASELINE:-next-baseline}
PROFILE=${PROFILE:-soak}
TOLERANCE=${TOLERANCE:-0.05}
ENGINE_CMD=${ENGINE_CMD:-}

engine=()
if [ -n "$ENGINE_CMD" ]; then
    engine=(--engine-cmd "$ENGINE_CMD")
fi

set +e
$LOADREPRO run --profile "$PROFILE" "${engine[@]}" --out "$OUT" --quiet "$@"
code=$?
set -e
echo "loadrepro run exited $code; reports in $OUT"
if [ "$code" -gt 1 ]; then
    exit "$code"  # a usage error or loadrepro's own: no verdict to gate on
fi
if [ -f "$BASELINE/report.json" ]; then
    set +e
    $LOADREPRO compare "$BASELINE" "$OUT" --gate --tolerance "$TOLERANCE" --out "$OUT/gate"
    code=$?
    set -e
    echo "loadrepro gate exited $code"
fi
if [ "$code" -eq 0 ]; then
    rm -rf "$NEXT_BASELINE" && cp -r "$OUT" "$NEXT_BASELINE"
fi
exit "$code"
