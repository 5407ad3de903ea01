#!/usr/bin/env bash
# A real llama.cpp bug, A/B'd: a whole (not streamed) answer whose client left is still made, for nobody, holding
# the only slot (ggml-org/llama.cpp#11340), so the requests after it wait past their timeout. STOCK is the last
# llama-cpp-python release whose llama.cpp has it, PATCHED the first whose llama.cpp drops the task when the
# connection closes; both are built from their source packages into the engine cache on first use
# (scripts/engines/llamacpp.sh). Exits as `loadrepro ab` does: 0 when the fix is confirmed.
#   examples/real-bugs/llamacpp-abandoned-whole.sh [OUT]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
STOCK="${STOCK:-0.3.6}"
PATCHED="${PATCHED:-0.3.7}"
OUT="${1:-llamacpp-abandoned-whole}"
LOADREPRO="${LOADREPRO:-loadrepro}"
MODEL="$("$ROOT/scripts/engines/gguf.sh" 26m)"
for version in "$STOCK" "$PATCHED"; do "$ROOT/scripts/engines/llamacpp.sh" "$version" >/dev/null; done
serve() { echo "env LLAMACPP_VERSION=$1 $ROOT/scripts/engines/serve-llamacpp.sh $MODEL {host} {port} -np 1 -c 4096"; }
exec $LOADREPRO ab --profile llamacpp-abandoned-whole --stock-cmd "$(serve "$STOCK")" \
  --patched-cmd "$(serve "$PATCHED")" --out "$OUT"
