#!/usr/bin/env bash
# Installs or builds every engine and model the engine tests use before the tests start: on a fresh machine a build
# beside the tests takes both cores from timing-sensitive ones (a 2 ms stub read as a 150 ms degradation). Each is
# reused from the cache when present (then this takes seconds); one that cannot be installed here is left to its
# tests, which skip and say why. PYTHON: an interpreter with loadrepro (for the GGUF models).
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
export PYTHON="${PYTHON:-python3}"
step() {
  local started result
  started=$(date +%s)
  if "$@" >/dev/null 2>&1; then result=ready; else result="not installed (its tests will say why)"; fi
  echo "engines: ${*#env } $result in $(( $(date +%s) - started )) s" >&2
}
# The installs (downloads and unpacking: the network and the disk) go on beside the builds (the compiler: the
# cores), one after another each: on an empty cache that takes a third off the whole (the builds are two thirds).
installs() {
  step bash "$HERE/vllm.sh"
  for version in 0.25.1 0.26.0 0.20.0 0.20.1; do step env LOADREPRO_VLLM_VERSION="$version" bash "$HERE/vllm.sh"; done
  step bash "$HERE/litellm.sh"
  step bash "$HERE/prometheus.sh"
}
installs &
beside=$!
step bash "$HERE/llamacpp.sh"
step bash "$HERE/llamacpp.sh" 0.3.16
step bash "$HERE/llamacpp.sh" 0.3.17
for version in 0.3.6 0.3.7 0.3.8; do step bash "$HERE/llamacpp.sh" "$version"; done
step bash "$HERE/gguf.sh" 26m
step bash "$HERE/gguf.sh" tiny
wait "$beside"
