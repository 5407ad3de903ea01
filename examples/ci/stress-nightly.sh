#!/usr/bin/env bash
# A nightly stress gate: run the stress battery against tonight's engine and fail on a phase that passed in the
# baseline (the stress.json of the last night whose gate was open, kept as an artifact) and fails tonight.
# loadrepro starts the engine itself, afresh for every phase (ENGINE_CMD, with {port} where the port goes; by
# default the simulated engine). PHASES chooses phases (comma-separated; default: the whole battery).
#
# Exit 1 when the gate closed: a phase passed in BASELINE and fails tonight (the gate's table names each and the
# rules that failed it). A phase that failed in both nights, one that skips tonight (the battery lost coverage: the
# gate says so) and one new tonight leave it open, exit 0. The first night (no baseline) has nothing to be held to:
# its battery becomes the baseline, and its failing phases are in junit.xml and stress.md, not in the exit code.
# Exit 2 or 3 when the battery gave no verdicts to gate on (a usage error, loadrepro's own failure).
#
# Tonight's stress.json becomes the next baseline (NEXT_BASELINE) when the gate was open: a regression keeps the
# gate closed night after night until the phase passes again, instead of becoming the baseline itself.
set -euo pipefail

LOADREPRO=${LOADREPRO:-loadrepro}
OUT=${OUT:-nightly-stress}
BASELINE=${BASELINE:-stress-baseline}
NEXT_BASELINE=${NEXT_BASELINE:-next-stress-baseline}
PHASES=${PHASES:-}
ENGINE_CMD=${ENGINE_CMD:-}

engine=()
if [ -n "$ENGINE_CMD" ]; then
    engine=(--engine-cmd "$ENGINE_CMD")
fi
phases=()
if [ -n "$PHASES" ]; then
    phases=(--phases "$PHASES")
fi

set +e
$LOADREPRO stress "${engine[@]}" "${phases[@]}" --out "$OUT" --quiet "$@"
code=$?
set -e
echo "loadrepro stress exited $code; reports in $OUT"
if [ "$code" -gt 1 ]; then
    exit "$code"  # a usage error or loadrepro's own: no verdicts to gate on
fi
if [ -f "$BASELINE/stress.json" ]; then
    set +e
    $LOADREPRO compare "$BASELINE/stress.json" "$OUT/stress.json" --gate --out "$OUT/gate"
    code=$?
    set -e
    echo "loadrepro gate exited $code"
else
    echo "no baseline at $BASELINE/stress.json: tonight's battery becomes it"
    code=0
fi
if [ "$code" -eq 0 ]; then  # only the verdicts are gated: stress.json (and stress.md to read) is all to keep
    rm -rf "$NEXT_BASELINE" && mkdir -p "$NEXT_BASELINE"
    cp "$OUT/stress.json" "$OUT/stress.md" "$NEXT_BASELINE/"
fi
exit "$code"
