#!/usr/bin/env bash
# The test command: sets up .venv from scratch if needed, checks the import layers, runs the whole
# suite; then the vLLM tests (marker `vllm`) in their own venv, .venv-vllm, which scripts/test_vllm.sh builds once.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/lint-imports  # the dependency order of pyproject.toml [tool.importlinter]; no cycles
.venv/bin/python -m pytest -n 2 -m "not vllm" "$@"
if [ $# -eq 0 ]; then bash scripts/test_vllm.sh; fi  # the whole suite: the vLLM tests too
