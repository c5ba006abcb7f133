#!/usr/bin/env bash
# The vLLM tests (marker `vllm`) in their own venv: builds .venv-vllm once (scripts/setup_vllm.sh),
# then runs them there. One process: the tests share one engine, whose start-up dominates.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_vllm.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-nobind}
exec .venv-vllm/bin/python -m pytest -m vllm -n 0 -p no:cacheprovider --ignore=tests/distributed "$@"  # Ray lives in .venv
