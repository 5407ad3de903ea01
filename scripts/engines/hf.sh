#!/usr/bin/env bash
# Prints the folder of the tiny Hugging Face model vLLM serves in the tests (serve-vllm.sh MODEL_DIR ...), written by
# make_tiny_hf.py into the engine cache on first use, in a folder keyed by that script (so a changed model is written
# anew), with vLLM's own Python (vllm.sh: installed first when the cache has none) and a tokenizer trained on
# loadrepro's record corpus. PYTHON: an interpreter with loadrepro (default: python3).
#   scripts/engines/serve-vllm.sh "$(scripts/engines/hf.sh)" 127.0.0.1 8000 --max-model-len 2048
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
MAKER="$HERE/make_tiny_hf.py"
DIGEST="$(sha256sum "$MAKER" | cut -c1-12)"
MODEL="${LOADREPRO_ENGINE_CACHE:-$HOME/.cache/loadrepro-engines}/models/hf-llama-$DIGEST"
if [ ! -f "$MODEL/config.json" ]; then
  VLLM_PYTHON="$("$HERE/vllm.sh")"
  CORPUS="$(dirname "$MODEL")/corpus.txt"
  mkdir -p "$(dirname "$MODEL")"
  "${PYTHON:-python3}" -c "import sys; from loadrepro.workload.corpus import record_pool
sys.stdout.write('\n'.join(record_pool(7).texts + record_pool(8).texts))" > "$CORPUS.part"
  mv "$CORPUS.part" "$CORPUS"
  HF_HUB_OFFLINE=1 "$VLLM_PYTHON" "$MAKER" "$MODEL" --corpus "$CORPUS" >&2
fi
echo "$MODEL"
