#!/usr/bin/env bash
# A real llama.cpp bug, A/B'd: a chat request whose body is not UTF-8 kills the server (the JSON parser's exception
# escapes the HTTP handler: SIGABRT). STOCK is the last llama-cpp-python release whose llama.cpp has it, PATCHED the
# first whose llama.cpp answers such a body with an error; both are built from their source packages into the
# engine cache on first use (scripts/engines/llamacpp.sh). Exits as `loadrepro ab` does: 0 when the fix is confirmed
# (stock fails with bad_input_crash and engine_death, patched passes).
#   examples/real-bugs/llamacpp-invalid-utf8.sh [OUT]
set -euo pipefail
exec "$(dirname "$0")/llamacpp-ab.sh" llamacpp-invalid-utf8 \
  "${STOCK:-0.3.7}" "${PATCHED:-0.3.8}" "${1:-llamacpp-invalid-utf8}" -np 2 -c 2048
