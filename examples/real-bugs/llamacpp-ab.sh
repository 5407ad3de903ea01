#!/usr/bin/env bash
# What the llama.cpp A/Bs here share: both releases built from their source packages into the engine cache on first
# use (scripts/engines/llamacpp.sh), each served with the 26M test model and the bug's flags, then `loadrepro ab` on
# the bug's profile. Exits as `loadrepro ab` does: 0 when the fix is confirmed.
#   examples/real-bugs/llamacpp-ab.sh PROFILE STOCK PATCHED OUT [llama-server flags...]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PROFILE="$1"; STOCK="$2"; PATCHED="$3"; OUT="$4"; shift 4
LOADREPRO="${LOADREPRO:-loadrepro}"
MODEL="$("$ROOT/scripts/engines/gguf.sh" 26m)"
for version in "$STOCK" "$PATCHED"; do "$ROOT/scripts/engines/llamacpp.sh" "$version" >/dev/null; done
serve() { echo "env LLAMACPP_VERSION=$1 $ROOT/scripts/engines/serve-llamacpp.sh $MODEL {host} {port} ${*:2}"; }
exec $LOADREPRO ab --profile "$PROFILE" --stock-cmd "$(serve "$STOCK" "$@")" --patched-cmd "$(serve "$PATCHED" "$@")" \
  --out "$OUT"
