"""The real model's benchmarks (bench_update.py / bench_rollout.py --model, bench_profile.py smollm2): the model
FLOPs their tokens/s and GEMM-peak shares divide by, and the config their recorded rows name (no model loaded)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from rlvr.config import load_config
from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "benchmarks" / "configs" / "smollm2_add.yaml"


def _module(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmarks import their siblings (_vllm_child)
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hand_flops(H, L, inter, V, rows, seq):
    """PaLM's 6N + 12 L d T a token, by hand: N = L (4 H^2 + 3 H I) + V H (q, k, v, o with as many key/value heads
    as heads; gate, up, down; the LM head once, tied or not; the input embedding's lookup not a matmul)."""
    n = L * (4 * H * H + 3 * H * inter) + V * H
    return rows * seq * (6 * n + 12 * L * H * seq)


@pytest.mark.parametrize("tied", [True, False])
def test_update_flops_count_the_lm_head_once_tied_or_not(tied):
    bench = _module("bench_update")
    H, L, heads, inter = 64, 2, 4, 128
    if tied:
        model = build_tiny_model(build_char_tokenizer(), arch="llama", **PRESETS["test"])
        V = model.config.vocab_size
    else:  # SmolLM2's own head is tied; an untied one (Qwen2.5-1.5B's) is its own tensor, counted once
        V = 97
        model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=H, num_hidden_layers=L,
                                             num_attention_heads=heads, num_key_value_heads=heads,
                                             intermediate_size=inter, tie_word_embeddings=False))
        assert any(name.startswith("lm_head") for name, _ in model.named_parameters())
    assert bench.model_flops(model, rows=3, seq=20) == _hand_flops(H, L, inter, V, rows=3, seq=20)


def test_the_real_model_rows_config_is_issue_37s_starting_point():
    """benchmarks/configs/smollm2_add.yaml (the command of every SmolLM2 row in benchmarks/results): the model by
    name, every a + b with a, b in 1..20 and its sum, through the chat template, 8 prompts x 8 of 48 tokens at T 1;
    bench_rollout.py --model and bench_profile.py smollm2 default to it."""
    cfg = load_config(CONFIG)
    assert cfg.model.path == "smollm2-135m-instruct" and cfg.task.name == "math_file"
    assert cfg.task.options["template"] == "chat"
    assert (cfg.train.batch_size // cfg.train.group_size, cfg.train.group_size) == (8, 8)
    assert (cfg.rollout.max_new_tokens, cfg.rollout.temperature, cfg.optim.lr) == (48, 1.0, 1e-5)
    rows = [json.loads(line) for line in (ROOT / cfg.task.options["path"]).read_text().splitlines()]
    pairs = {(int(a), int(b)) for a, b in
             (r["question"].removeprefix("What is ").removesuffix("?").split(" + ") for r in rows)}
    assert pairs == {(a, b) for a in range(1, 21) for b in range(1, 21)} and len(rows) == 400
    assert all(int(r["answer"]) == sum(map(int, r["question"][8:-1].split(" + "))) for r in rows)
    assert _module("bench_rollout").SMOLLM2_CONFIG == CONFIG
    assert _module("bench_profile").SETTINGS["smollm2"][0] == CONFIG
