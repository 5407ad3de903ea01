#!/usr/bin/env bash
# Installs the LiteLLM proxy (pinned; with prisma, without which a request lacking its key is answered 500 instead of
# 401) into its own virtual environment in a cache outside the checkout, keyed by the version; a machine that
# installed it already reuses it. Prints the proxy's command.
set -euo pipefail
VERSION=1.108.7
CACHE="${LOADREPRO_ENGINE_CACHE:-$HOME/.cache/loadrepro-engines}/litellm-$VERSION"
BIN="$CACHE/bin/litellm"
if [ -x "$BIN" ] && [ -f "$CACHE/.complete" ]; then echo "$BIN"; exit 0; fi
rm -rf "$CACHE"
python3 -m venv "$CACHE"
"$CACHE/bin/python" -m pip install --quiet --upgrade pip >&2 || true
"$CACHE/bin/python" -m pip install --quiet "litellm[proxy]==$VERSION" prisma >&2
"$CACHE/bin/python" -c "import litellm.proxy.proxy_server, prisma" >&2
touch "$CACHE/.complete"
echo "$BIN"
