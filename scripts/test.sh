#!/usr/bin/env bash
# The test command: sets up .venv from scratch if needed, checks the import layers, then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/lint-imports  # the dependency order of pyproject.toml [tool.importlinter]; no cycles
exec .venv/bin/python -m pytest -n 2 "$@"
