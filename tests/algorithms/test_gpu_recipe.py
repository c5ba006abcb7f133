"""configs/recipes/smollm2_gpu.yaml is the SmolLM2 recipe on a GPU: smollm2_full's run (word problems with a family
of phrasings held out, its prompts, sampling, steps, batch, algorithm and learning rate) placed on cuda in bfloat16
with the vLLM engine and one micro-batch a step, and the same file takes a Qwen2.5-Instruct folder through
model.path (docs/gpu.md). No GPU or vLLM is needed to load it; the GPU run itself is
benchmarks/gpu/device_checks.sh's `smollm2` check."""

from __future__ import annotations

import dataclasses

from rlvr.config import load_config


def test_the_gpu_recipe_is_the_cpu_recipe_placed_on_a_gpu_with_vllm():
    gpu, cpu = load_config("recipes/smollm2_gpu"), load_config("recipes/smollm2_full")
    assert (gpu.model.path, gpu.model.device, gpu.model.dtype) == ("smollm2-135m-instruct", "cuda", "bfloat16")
    assert (gpu.rollout.engine, gpu.rollout.gpu_memory_utilization, gpu.rollout.enable_sleep_mode) == ("vllm", 0.3,
                                                                                                       True)
    assert dataclasses.replace(gpu.model, device=cpu.model.device, dtype=cpu.model.dtype) == cpu.model
    assert dataclasses.replace(gpu.rollout, engine=cpu.rollout.engine,
                               gpu_memory_utilization=cpu.rollout.gpu_memory_utilization) == cpu.rollout
    for section in ("seed", "task", "algorithm", "optim", "eval"):
        assert getattr(gpu, section) == getattr(cpu, section), section
    # one micro-batch a step on the GPU: the same gradient as the CPU recipe's smaller passes (memory, not math)
    assert gpu.train.micro_batch_size == 0 and cpu.train.micro_batch_size > 0
    assert dataclasses.replace(gpu.train, micro_batch_size=cpu.train.micro_batch_size) == cpu.train
    assert gpu.task.options["held_out_templates"] and gpu.algorithm.preset == "grpo"


def test_a_qwen_folder_takes_the_models_place_and_nothing_else_changes(tmp_path):
    qwen = tmp_path / "Qwen2.5-1.5B-Instruct"
    qwen.mkdir()
    (qwen / "config.json").write_text('{"model_type": "qwen2"}')
    shipped = load_config("recipes/smollm2_gpu")
    swapped = load_config("recipes/smollm2_gpu", [f"model.path={qwen}"])
    assert swapped.model.path == str(qwen)
    assert dataclasses.replace(swapped.model, path=shipped.model.path) == shipped.model
    assert (swapped.task, swapped.train, swapped.rollout) == (shipped.task, shipped.train, shipped.rollout)
