#!/usr/bin/env bash
# Prints the path of the tiny GGUF model of SIZE (tiny | 26m), written by make_tiny_gguf.py into the engine cache
# on first use, in a folder keyed by that script (so a changed model is written anew). PYTHON: an interpreter with
# loadrepro and its dev dependencies (default: python3).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
SIZE="${1:-26m}"
MAKER="$HERE/make_tiny_gguf.py"
DIGEST="$(sha256sum "$MAKER" | cut -c1-12)"
MODEL="${LOADREPRO_ENGINE_CACHE:-$HOME/.cache/loadrepro-engines}/models/gguf-$SIZE-$DIGEST/model.gguf"
if [ ! -f "$MODEL" ]; then
  "${PYTHON:-python3}" "$MAKER" "$MODEL" --size "$SIZE" >&2
fi
echo "$MODEL"
