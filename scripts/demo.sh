#!/usr/bin/env bash
# The main job: sets up .venv from scratch if needed, then runs `rlvr demo` offline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/rlvr demo "$@"
