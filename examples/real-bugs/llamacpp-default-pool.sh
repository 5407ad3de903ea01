#!/usr/bin/env bash
# A live llama.cpp bug, still present in the llama.cpp of llama-cpp-python 0.3.36: with its default flags (no -np:
# 4 slots on one unified KV pool, each slot's context the whole pool) no request is refused at admission, and when
# concurrent requests together outgrow the pool the server fails every one of them with "Context size has been
# exceeded." (ggml-org/llama.cpp#23652, closed as stale), though each alone fits. Runs the load on such a server,
# then the same requests one at a time on a fresh one (which must pass), and bundles the failing run for a
# maintainer (python3 replay.py --base-url URL against their own server). Exits 0 when the bug showed.
#   examples/real-bugs/llamacpp-default-pool.sh [OUT]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
VERSION="${VERSION:-0.3.36}"
OUT="${1:-llamacpp-default-pool}"
LOADREPRO="${LOADREPRO:-loadrepro}"
MODEL="$("$ROOT/scripts/engines/gguf.sh" 26m)"
"$ROOT/scripts/engines/llamacpp.sh" "$VERSION" >/dev/null
ENGINE="env LLAMACPP_VERSION=$VERSION $ROOT/scripts/engines/serve-llamacpp.sh $MODEL {host} {port} -c 1024"
if $LOADREPRO run --profile llamacpp-unified-pool --engine-cmd "$ENGINE" --out "$OUT/concurrent"; then
  echo "the default pool held on $VERSION: the bug did not show" >&2
  exit 1
fi
$LOADREPRO run --profile llamacpp-unified-pool --engine-cmd "$ENGINE" --set load.concurrency=1 --out "$OUT/alone"
$LOADREPRO bundle "$OUT/concurrent" -o "$OUT/llamacpp-default-pool.zip"
