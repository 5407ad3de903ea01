#!/usr/bin/env bash
# Starts llama.cpp's server (built and cached by llamacpp.sh) on a GGUF model; usable as an engine command:
#   loadrepro run --engine-cmd "scripts/engines/serve-llamacpp.sh MODEL.gguf {host} {port} -c 2048 -np 4"
# Extra arguments go to llama-server. One thread (-t 1) leaves the client a core. LLAMACPP_VERSION picks another
# llama-cpp-python release's llama.cpp (built by llamacpp.sh on first use), for A/B of an old release.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ $# -lt 3 ]; then echo "usage: $0 MODEL.gguf HOST PORT [llama-server arguments]" >&2; exit 2; fi
MODEL="$1"; HOST="$2"; PORT="$3"; shift 3
BIN="$("$HERE/llamacpp.sh" ${LLAMACPP_VERSION:-})"
exec "$BIN" -m "$MODEL" --host "$HOST" --port "$PORT" --metrics -t 1 -a tiny "$@"
