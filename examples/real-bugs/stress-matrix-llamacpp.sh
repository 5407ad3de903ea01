#!/usr/bin/env bash
# The stress battery against several llama.cpp releases, side by side: each built from its llama-cpp-python source
# package into the engine cache on first use (scripts/engines/llamacpp.sh), served with the 26M test model, four
# slots of 1,024 tokens each; every phase of every build on a llama-server started afresh. Writes OUT/matrix.md
# (phases x builds, the first phase each failed) and each build's battery in OUT/VERSION. Exits as `loadrepro
# stress` does: 0 when no phase of any build failed, 1 when one did.
#   examples/real-bugs/stress-matrix-llamacpp.sh [OUT] [VERSION...]   (default: 0.3.6 0.3.7 0.3.8 0.3.16 0.3.17 0.3.36)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${1:-stress-matrix-llamacpp}"
shift $(( $# > 0 ? 1 : 0 ))
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(0.3.6 0.3.7 0.3.8 0.3.16 0.3.17 0.3.36)
LOADREPRO="${LOADREPRO:-loadrepro}"
MODEL="$("$ROOT/scripts/engines/gguf.sh" 26m)"
builds=()
for version in "${VERSIONS[@]}"; do
  "$ROOT/scripts/engines/llamacpp.sh" "$version" >/dev/null
  builds+=(--engine-cmd "env LLAMACPP_VERSION=$version $ROOT/scripts/engines/serve-llamacpp.sh $MODEL {host} {port} -c 4096 -np 4" --label "$version")
done
exec $LOADREPRO stress "${builds[@]}" --out "$OUT" ${PHASES:+--phases "$PHASES"}
