#!/usr/bin/env bash
# A nightly regression gate: run the same profile against tonight's engine and compare it with the last good
# night's run (BASELINE, a run directory kept as an artifact). loadrepro starts the engine itself (ENGINE_CMD, with
# {port} where the port goes; by default the simulated engine of the profile). Exit 1 when tonight's run is
# significantly slower (TTFT p50/p95, ITL, decode speed, SLO attainment) by more than TOLERANCE and beyond the
# noise between runs, or a rule fails that did not fail before; exit 0 otherwise, and tonight's run becomes the
# baseline to keep (NEXT_BASELINE). Without a baseline, tonight's run is judged alone and becomes the first one.
#
# Two runs of one unchanged engine differ by more than the halves of one run do, so each night runs TRIALS runs
# (3 by default, each on a fresh engine): the gap between them is the noise the gate allows. With HISTORY, a
# directory kept between nights, every night with a verdict is added to it, closed ones too (the newest KEEP kept):
# the gate allows the spread of those earlier nights, and looks for a change point over them and tonight, which
# is how a creep of a few % a night closes it. A history of open nights only would drop the very nights a change
# shows in. TRIALS=1 and no HISTORY: the gate says it cannot tell a latency change from the noise between runs,
# and only rules and the SLO's attainment can close it.
set -euo pipefail

LOADREPRO=${LOADREPRO:-loadrepro}
OUT=${OUT:-nightly-run}
BASELINE=${BASELINE:-baseline-run}
NEXT_BASELINE=${NEXT_BASELINE:-next-baseline}
PROFILE=${PROFILE:-soak}
TOLERANCE=${TOLERANCE:-0.05}
TRIALS=${TRIALS:-3}
HISTORY=${HISTORY:-}
KEEP=${KEEP:-14}
ENGINE_CMD=${ENGINE_CMD:-}

engine=()
if [ -n "$ENGINE_CMD" ]; then
    engine=(--engine-cmd "$ENGINE_CMD")
fi
trials=()
if [ "$TRIALS" -gt 1 ]; then
    trials=(--trials "$TRIALS")
fi

set +e
$LOADREPRO run --profile "$PROFILE" "${engine[@]}" "${trials[@]}" --out "$OUT" --quiet "$@"
code=$?
set -e
echo "loadrepro run exited $code; reports in $OUT"
if [ "$code" -gt 1 ]; then
    exit "$code"  # a usage error or loadrepro's own: no verdict to gate on
fi
if [ -f "$BASELINE/report.json" ]; then
    history=()
    if [ -n "$HISTORY" ] && [ -d "$HISTORY" ]; then
        history=(--history "$HISTORY")
    fi
    set +e
    $LOADREPRO compare "$BASELINE" "$OUT" --gate --tolerance "$TOLERANCE" "${history[@]}" --out "$OUT/gate"
    code=$?
    set -e
    echo "loadrepro gate exited $code"
fi
if [ -n "$HISTORY" ]; then  # every night, open or closed: a change point needs the nights after it too
    mkdir -p "$HISTORY"
    cp -r "$OUT" "$HISTORY/$(date -u +%Y%m%dT%H%M%SZ)"
    ls -1d "$HISTORY"/*/ | sort | head -n "-$KEEP" | xargs -r rm -rf  # the newest KEEP nights
fi
if [ "$code" -eq 0 ]; then
    rm -rf "$NEXT_BASELINE" && cp -r "$OUT" "$NEXT_BASELINE"
fi
exit "$code"
