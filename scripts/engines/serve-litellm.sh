#!/usr/bin/env bash
# Starts the LiteLLM proxy (installed and cached by litellm.sh) in front of an OpenAI-compatible engine, wanting the
# key in $LITELLM_MASTER_KEY on every request; usable as an engine command:
#   LITELLM_MASTER_KEY=sk-... scripts/engines/serve-litellm.sh http://127.0.0.1:8080/v1 MODEL {host} {port}
# Its /health/liveliness answers 200 whatever the engine behind it does.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ $# -lt 4 ]; then echo "usage: $0 UPSTREAM_V1_URL MODEL HOST PORT" >&2; exit 2; fi
UPSTREAM="$1"; MODEL="$2"; HOST="$3"; PORT="$4"
BIN="$("$HERE/litellm.sh")"
CONFIG="${TMPDIR:-/tmp}/loadrepro-litellm-$PORT.yaml"
cat > "$CONFIG" <<YAML
model_list:
  - model_name: $MODEL
    litellm_params:
      model: openai/$MODEL
      api_base: $UPSTREAM
      api_key: none
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
YAML
# The model cost map from disk: this machine reaches no GitHub.
LITELLM_LOCAL_MODEL_COST_MAP=True exec "$BIN" --config "$CONFIG" --host "$HOST" --port "$PORT"
