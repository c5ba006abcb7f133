"""The learner's memory model (rlvr.train.memory): parameter counts, the parts by hand, how settings move them, and
the preflight's one line for a set-up that cannot fit."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from rlvr.config import ConfigError, load_config
from rlvr.models import PRESETS, Placement, build_char_tokenizer, tiny_config
from rlvr.train import memory
from rlvr.train.memory import GIB, Dims, LearnerSetup, advice, check_learner_memory, learner_memory

ROOT = Path(__file__).resolve().parents[2]
QWEN_05B = Qwen2Config(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                       intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True)
QWEN_7B = Qwen2Config(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                      intermediate_size=18944, vocab_size=152064, tie_word_embeddings=False)


@pytest.mark.parametrize("config", [QWEN_05B, QWEN_7B, LlamaConfig(hidden_size=64, num_hidden_layers=3,
                                                                    num_attention_heads=4, intermediate_size=96,
                                                                    vocab_size=101, attention_bias=False),
                                    tiny_config(build_char_tokenizer(), "qwen2", **PRESETS["demo"])])
def test_parameters_counted_from_the_config_are_the_models(config):
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    counted = Dims.from_config(config).params
    if getattr(config, "attention_bias", True) is False:  # Llama: no q, k, v biases, which the count includes
        heads = config.num_attention_heads * (config.hidden_size // config.num_attention_heads)
        counted -= config.num_hidden_layers * 3 * heads
    assert counted == sum(p.numel() for p in model.parameters())
    assert Dims.from_config(QWEN_05B).params == 494_032_768  # Qwen2.5-0.5B's published 0.49B


def test_parts_by_hand():
    dims = Dims(params=1000, layers=2, hidden=4, vocab=10, ffn=8, q_width=4, kv_width=2, unit=100)
    s = LearnerSetup(trainable=1000, compute_bytes=2, reference=True, rows=3, tokens=5, scored=2)
    parts = learner_memory(dims, s)
    # per token and layer: 8 x 4 + 2 x (2 x 4 + 2 x 4 + 2 x 2 + 4 x 8) = 32 + 104 = 136; 15 tokens x 2 layers
    assert parts == {"weights": 4000, "gradients": 4000, "optimizer": 8000, "reference": 2000,
                     "activations": 15 * 2 * 136, "logits": 2 * 4 * 6 * 10, "engine": 0, "host": 0}
    # two ranks, gathers in bfloat16, offloaded: the device keeps the unit being gathered and the reference's half
    sharded = learner_memory(dims, LearnerSetup(trainable=1000, ranks=2, compute_bytes=2, gather_bytes=2,
                                                offload=True, reference=True, rows=3, tokens=5, scored=2,
                                                checkpointing=True, logprob_chunk=4))
    assert sharded["weights"] == 200 and sharded["gradients"] == sharded["optimizer"] == 0
    assert sharded["host"] == 16 * 1000 / 2 and sharded["reference"] == 1000
    assert sharded["activations"] == 15 * (2 * 4 * 4 + 136)  # each layer's float32 input + one layer recomputed
    assert sharded["logits"] == 2 * 4 * 4 * 10  # 4 positions at a time


@settings(max_examples=60, deadline=None)
@given(n=st.floats(1e6, 1e11), layers=st.integers(2, 96), rows=st.integers(1, 64), tokens=st.integers(2, 8192),
       ranks=st.integers(1, 16), chunk=st.integers(1, 4096), half=st.booleans())
def test_every_setting_shrinks_what_it_names(n, layers, rows, tokens, ranks, chunk, half):
    dims = Dims.from_config(QWEN_7B, n)
    dims = Dims(dims.params, layers, dims.hidden, dims.vocab, dims.ffn, dims.q_width, dims.kv_width, dims.unit)
    base = LearnerSetup(trainable=n, compute_bytes=2 if half else 4, reference=True, rows=rows, tokens=tokens,
                        scored=tokens // 2 + 1)
    whole = learner_memory(dims, base)
    total = lambda p: sum(v for k, v in p.items() if k != "host")  # noqa: E731
    sharded = learner_memory(dims, LearnerSetup(**{**vars(base), "ranks": ranks}))
    for part in ("gradients", "optimizer", "reference"):
        assert sharded[part] == pytest.approx(whole[part] / ranks)
    checkpointed = learner_memory(dims, LearnerSetup(**{**vars(base), "checkpointing": True}))
    assert checkpointed["activations"] <= whole["activations"]
    chunked = learner_memory(dims, LearnerSetup(**{**vars(base), "logprob_chunk": chunk}))
    assert chunked["logits"] <= whole["logits"] and total(chunked) <= total(whole)
    offloaded = learner_memory(dims, LearnerSetup(**{**vars(base), "ranks": ranks, "offload": True}))
    assert total(offloaded) <= total(sharded) and offloaded["host"] == pytest.approx(16 * n / ranks)


def _cfg(tmp_path, *sets):
    return load_config(None, [f"out_dir={tmp_path}", *sets])


def test_a_7b_learner_on_one_80gb_gpu_is_refused_until_its_advice_is_followed(tmp_path, monkeypatch):
    """Qwen2.5-7B, 16 rows of 256 + 1,024 tokens per micro-batch, on an 80 GB GPU (faked: this test has none): each
    refusal is one line naming the largest part and a setting; set it, check again, until it fits."""
    monkeypatch.setattr(memory, "device_capacity", lambda device: 80 * GIB)
    monkeypatch.setattr(memory, "resolve_placement", lambda m: Placement(torch.device("cuda"), torch.bfloat16, "sdpa",
                                                                         m.gradient_checkpointing))
    sets = ["rollout.max_new_tokens=1024", "train.batch_size=64", "train.micro_batch_size=16", "model.dtype=bfloat16",
            "distributed.backend=ray"]
    followed = []
    for _ in range(5):
        try:
            parts = check_learner_memory(_cfg(tmp_path, *sets), QWEN_7B, None, 256)
            break
        except ConfigError as err:
            line = str(err)
            assert "\n" not in line and line.startswith("the learner needs about ") and "has 80.0 GiB" in line
            advised = re.findall(r"([a-z_.]+)=(\S+?)[ ,)]", line.split("shrinks with ")[1] + " ")
            followed.append(line.split("the largest part, ")[1].split(",")[0])
            sets += [f"{key}={value}" for key, value in advised]
    assert followed == ["activations", "optimizer", "optimizer"]  # checkpointing, 2 sharded learners, CPU offload
    assert {"model.gradient_checkpointing=true", "distributed.shard=true", "distributed.learners=2",
            "distributed.cpu_offload=true"} <= set(sets)
    assert sum(v for k, v in parts.items() if k != "host") < 80 * GIB and parts["host"] > 50 * GIB


def test_advice_follows_what_is_already_set(tmp_path, monkeypatch):
    dims = Dims.from_config(QWEN_05B)
    assert advice("reference", _cfg(tmp_path), dims) == "distributed.shard=true and distributed.learners=2"
    sharded = ["distributed.backend=ray", "distributed.learners=2", "distributed.shard=true"]
    assert advice("optimizer", _cfg(tmp_path, *sharded), dims) == "distributed.learners=4"  # CPU: no offload
    assert advice("reference", _cfg(tmp_path, *sharded), dims) == "model.dtype=bfloat16"
    assert advice("logits", _cfg(tmp_path), dims) == "train.logprob_chunk=110"  # 2**24 logits a chunk at V 151,936
    assert advice("logits", _cfg(tmp_path, "train.logprob_chunk=512"), dims) == "a smaller train.logprob_chunk (now 512)"
    assert advice("engine", _cfg(tmp_path), dims) == "rollout.enable_sleep_mode=true"
    assert advice("activations", _cfg(tmp_path, "model.gradient_checkpointing=true"), dims) \
        == "a smaller train.micro_batch_size (now 64)"


def test_rlvr_train_refuses_a_model_that_cannot_fit_before_writing_anything(tmp_path):
    """A tiny model made huge (60B parameters) on this machine's CPU: one line, exit code 2, no run folder."""
    out = tmp_path / "run"
    sizes = "model.tiny_sizes={hidden_size: 8192, num_layers: 80, intermediate_size: 28672, num_heads: 64}"
    proc = subprocess.run([sys.executable, "-m", "rlvr", "train", str(ROOT / "configs" / "sort.yaml"), "--set",
                           f"out_dir={out}", "--set", sizes,
                           "--set", "train.steps=1", "--set", "log.progress=false"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "the learner needs about" in lines[0] and "distributed.shard=true" in lines[0]
    assert not out.exists()
