#!/usr/bin/env bash
# A real llama.cpp bug, A/B'd: a stream cancelled by its client while it waits behind the only busy slot is still
# run later, for nobody, holding the slot (ggml-org/llama.cpp#11285). STOCK is the last llama-cpp-python release
# whose llama.cpp has it, PATCHED the first whose llama.cpp drops such a request; both are built from their source
# packages on first use. Exits as `loadrepro ab` does: 0 when
# the fix is confirmed (stock fails with zombie_requests, patched passes).
#   examples/real-bugs/llamacpp-cancelled-queued.sh [OUT]
set -euo pipefail
exec "$(dirname "$0")/llamacpp-ab.sh" llamacpp-cancelled-queued \
  "${STOCK:-0.3.16}" "${PATCHED:-0.3.17}" "${1:-llamacpp-cancelled-queued}" -np 1 -c 4096
