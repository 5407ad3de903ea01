#!/usr/bin/env bash
# Builds llama.cpp's llama-server from the llama.cpp tree inside the pinned llama-cpp-python source package, into a
# cache outside the checkout keyed by that version; a machine that built it already reuses it. Prints the binary.
# An older release (scripts/engines/llamacpp.sh 0.3.6) is built the same way: its server is one of the examples.
set -euo pipefail
VERSION="${1:-0.3.36}"
CACHE="${LOADREPRO_ENGINE_CACHE:-$HOME/.cache/loadrepro-engines}/llama.cpp-$VERSION"
BIN="$CACHE/llama-server"
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
command -v cmake >/dev/null || { echo "cmake is needed to build llama-server" >&2; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK" >&2
tar xzf "$WORK/llama_cpp_python-$VERSION.tar.gz" -C "$WORK" --wildcards "llama_cpp_python-$VERSION/vendor/llama.cpp/*"
cmake -S "$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES="$([ "$VERSION" = 0.3.36 ] && echo OFF || echo ON)" \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >&2
cmake --build "$WORK/build" --target llama-server -j"$(nproc)" >&2
mkdir -p "$CACHE"
cp "$WORK/build/bin/llama-server" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
echo "$BIN"
