#!/usr/bin/env bash
# Starts vLLM's OpenAI server (CPU build, installed and cached by vllm.sh) on a local model directory; usable as
# an engine command:
#   loadrepro run --engine-cmd "scripts/engines/serve-vllm.sh MODEL_DIR {host} {port} --num-gpu-blocks-override 640"
# Extra arguments go to the server. No hub access: the model is local.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ $# -lt 3 ]; then echo "usage: $0 MODEL_DIR HOST PORT [vLLM server arguments]" >&2; exit 2; fi
MODEL="$1"; HOST="$2"; PORT="$3"; shift 3
PY="$("$HERE/vllm.sh")"
export HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1
# vLLM's CPU backend binds busy OpenMP threads to every core by default, which starves the load generator on a
# small machine; one core for the engine leaves the other to the client.
export VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-0}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec "$PY" -m vllm.entrypoints.openai.api_server --model "$MODEL" --served-model-name tiny --host "$HOST" \
  --port "$PORT" --enforce-eager "$@"
