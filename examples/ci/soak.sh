#!/usr/bin/env bash
# A CI soak job's steps: start the engine (here the simulated one; put yours in ENGINE_CMD), wait for its /health,
# soak it for DURATION seconds, and exit with loadrepro's code (0 pass, 1 the engine failed, 2 usage, 3 loadrepro's
# own failure). The run directory OUT holds report.json/md/html, junit.xml and the engine's log: keep it as an
# artifact whatever the outcome. Reports are rewritten every minute, so a job killed by its timeout still leaves one.
set -euo pipefail

LOADREPRO=${LOADREPRO:-loadrepro}
OUT=${OUT:-soak-run}
DURATION=${DURATION:-600}
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
$LOADREPRO run --profile soak --base-url "http://127.0.0.1:$PORT" --out "$OUT" --quiet \
    --set "load.duration_s=$DURATION" --set "watch.engine_log='$OUT/engine.log'" "$@"
code=$?
set -e
echo "loadrepro exited $code; reports in $OUT"
exit "$code"
