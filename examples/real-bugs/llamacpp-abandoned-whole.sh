#!/usr/bin/env bash
# A real llama.cpp bug, A/B'd: a whole (not streamed) answer whose client left is still made, for nobody, holding
# the only slot (ggml-org/llama.cpp#11340), so the requests after it wait past their timeout. STOCK is the last
# llama-cpp-python release whose llama.cpp has it, PATCHED the first whose llama.cpp drops the task when the
# connection closes; both are built from their source packages into the engine cache on first use
# (scripts/engines/llamacpp.sh). Exits as `loadrepro ab` does: 0 when the fix is confirmed.
#   examples/real-bugs/llamacpp-abandoned-whole.sh [OUT]
set -euo pipefail
exec "$(dirname "$0")/llamacpp-ab.sh" llamacpp-abandoned-whole \
  "${STOCK:-0.3.6}" "${PATCHED:-0.3.7}" "${1:-llamacpp-abandoned-whole}" -np 1 -c 16384
