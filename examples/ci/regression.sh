#!/usr/bin/env bash
# A nightly regression gate: run the same profile against tonight's engine and compare it with the last good
# night's run (BASELINE, a run directory kept as an artifact). Exit 1 when tonight's run is significantly slower
# (TTFT p50/p95, ITL, decode speed, SLO attainment) by more than TOLERANCE, or a rule fails that did not fail
# before; exit 0 otherwise, and tonight's run becomes the baseline to keep (NEXT_BASELINE). Without a baseline,
# tonight's run is judged alone and becomes the first one.
set -euo pipefail

LOADREPRO=${LOADREPRO:-loadrepro}
OUT=${OUT:-nightly-run}
BASELINE=${BASELINE:-baseline-run}
NEXT_BASELINE=${NEXT_BASELINE:-next-baseline}
PROFILE=${PROFILE:-soak}
TOLERANCE=${TOLERANCE:-0.05}
PORT=${PORT:-8000}
ENGINE_CMD=${ENGINE_CMD:-"$LOADREPRO sim --scenario healthy --port $PORT"}

mkdir -p "$OUT"
$ENGINE_CMD > "$OUT/engine.log" 2>&1 &
engine=$!
trap 'kill "$engine" 2>/dev/null || true; wait "$engine" 2>/dev/null || true' EXIT

python3 - "$PORT" <<'PY'
import sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/health"
for _ in range(600):
    try:
        if urllib.request.urlopen(url, timeout=2).status == 200:
            sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit("the engine did not answer /health in 5 minutes")
PY

set +e
$LOADREPRO run --profile "$PROFILE" --base-url "http://127.0.0.1:$PORT" --out "$OUT" --quiet \
    --set "watch.engine_log='$OUT/engine.log'" "$@"
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
