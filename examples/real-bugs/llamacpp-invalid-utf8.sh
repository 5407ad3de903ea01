#!/usr/bin/env bash
# A real llama.cpp bug, A/B'd: a chat request whose body is not UTF-8 kills the server (the JSON parser's exception
# escapes the HTTP handler: SIGABRT). STOCK is the last llama-cpp-python release whose llama.cpp has it, PATCHED the
# first whose llama.cpp answers such a body with an error; both are built from their source packages into the
# engine cache on first use (scripts/engines/llamacpp.sh). Exits as `loadrepro ab` does: 0 when the fix is confirmed
# (stock fails with bad_input_crash and engine_death, patched passes).
#   examples/real-bugs/llamacpp-invalid-utf8.sh [OUT]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
STOCK="${STOCK:-0.3.7}"
PATCHED="${PATCHED:-0.3.8}"
OUT="${1:-llamacpp-invalid-utf8}"
LOADREPRO="${LOADREPRO:-loadrepro}"
MODEL="$("$ROOT/scripts/engines/gguf.sh" 26m)"
for version in "$STOCK" "$PATCHED"; do "$ROOT/scripts/engines/llamacpp.sh" "$version" >/dev/null; done
serve() { echo "env LLAMACPP_VERSION=$1 $ROOT/scripts/engines/serve-llamacpp.sh $MODEL {host} {port} -np 2 -c 2048"; }
exec $LOADREPRO ab --profile llamacpp-invalid-utf8 --stock-cmd "$(serve "$STOCK")" \
  --patched-cmd "$(serve "$PATCHED")" --out "$OUT"
