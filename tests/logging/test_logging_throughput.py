"""The perf/ record of a step: model FLOPs (PaLM appendix B), MFU against a GPU's stated peak, tokens/s, memory.
The FLOP counts are checked by hand and against a token-by-token sum; the parameter count against the module."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.logging.throughput import (ModelShape, Throughput, generate_flops, gpu_peak_tflops, peak_rss_mib,
                                     train_flops, utilisation)
from rlvr.models import load_model, make_tiny_model_dir


def test_train_flops_by_hand():
    # N=100, L=2, d_attn=8, one sequence of T=3: per token 6*100 + 12*2*8*3 = 600 + 576 = 1176; 3 tokens: 3528
    assert train_flops(100, 2, 8, [3]) == 3528
    assert train_flops(100, 2, 8, [3], epochs=2) == 7056
    # two sequences, T=1 and T=2: 1*(600+192) + 2*(600+384) = 792 + 1968
    assert train_flops(100, 2, 8, [1, 2]) == 2760


def test_generate_flops_by_hand():
    # N=100, L=2, d_attn=8; prompt 2, three generated tokens attending to 3, 4, 5 positions:
    # 3 * 2N + 4*2*8*(3+4+5) = 600 + 64*12 = 1368
    assert generate_flops(100, 2, 8, [2], [3]) == 1368
    assert generate_flops(100, 2, 8, [2, 5], [3, 0]) == 1368  # a completion of no token costs nothing


def test_utilisation_by_hand():
    assert utilisation(5e12, 2.0, 10.0) == pytest.approx(0.25)  # 2.5 TFLOP/s of a 10 TFLOP/s peak


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 10**6), layers=st.integers(1, 8), d=st.integers(1, 64),
       pairs=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=6))
def test_generate_flops_is_the_sum_over_each_generated_token(n, layers, d, pairs):
    """The closed form c p + c (c + 1) / 2 equals summing 2N + 4 L d t token by token."""
    per_token = sum(2 * n + 4 * layers * d * (p + i) for p, c in pairs for i in range(1, c + 1))
    assert generate_flops(n, layers, d, [p for p, _ in pairs], [c for _, c in pairs]) == pytest.approx(per_token)


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 10**6), layers=st.integers(1, 8), d=st.integers(1, 64),
       lens=st.lists(st.integers(0, 64), max_size=6), epochs=st.integers(1, 4))
def test_train_flops_adds_over_sequences_and_epochs_and_triples_a_forward(n, layers, d, lens, epochs):
    """Sequences add; epochs multiply; the update of a sequence is 3x the forward of the same tokens as
    PaLM counts it (6N vs 2N, 12 L d T vs 4 L d T)."""
    total = train_flops(n, layers, d, lens, epochs)
    assert total == pytest.approx(epochs * sum(train_flops(n, layers, d, [T]) for T in lens))
    forward = sum(T * (2 * n + 4 * layers * d * T) for T in lens)
    assert total == pytest.approx(3 * epochs * forward)


@pytest.mark.parametrize("name, dtype, peak", [
    ("NVIDIA H100 80GB HBM3", "bfloat16", 989.4), ("NVIDIA H100 PCIe", "bfloat16", 756.0),
    ("NVIDIA H100 NVL", "float16", 835.5), ("NVIDIA H200", "float32", 66.9), ("NVIDIA A100-SXM4-80GB", "bfloat16", 312.0),
    ("NVIDIA L4", "bfloat16", 121.0), ("NVIDIA L40S", "bfloat16", 362.1), ("NVIDIA A10", "float32", 31.2),
    ("Tesla V100-SXM2-16GB", "float16", 125.0), ("Tesla V100-SXM2-16GB", "bfloat16", None),
    ("NVIDIA GeForce GTX 1080", "float32", None)])
def test_gpu_peaks_by_name(name, dtype, peak):
    assert gpu_peak_tflops(name, dtype) == peak


def test_model_shape_counts_the_weights_that_multiply(tmp_path):
    """The tiny model ties its embedding to the output layer: every parameter multiplies (the head). An untied
    model's input table is a lookup and is left out."""
    folder = make_tiny_model_dir(tmp_path / "tiny", preset="test")
    model = load_model(folder)
    config = model.config
    shape = ModelShape.from_folder(folder)
    assert shape == ModelShape(float(sum(p.numel() for p in model.parameters())), config.num_hidden_layers,
                               config.num_attention_heads * config.hidden_size // config.num_attention_heads)
    config.tie_word_embeddings = False
    untied = type(model)(config)
    untied.save_pretrained(tmp_path / "untied")
    table = untied.get_input_embeddings().weight.numel()
    assert ModelShape.from_folder(tmp_path / "untied").n_params == sum(p.numel() for p in untied.parameters()) - table
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "config.json").write_text(json.dumps({"hidden_size": 8}))
    assert ModelShape.from_folder(tmp_path / "none") is None and ModelShape.from_folder(tmp_path / "nothing") is None


def test_measure_gives_rates_flops_and_mfu():
    shape = ModelShape(100.0, 2, 8)
    timings = {"rollout_s": 0.5, "update_s": 0.25, "s_per_step": 1.0}
    perf = Throughput(shape, epochs=2, peak_tflops=1e-9, cuda=None).measure([2, 2], [3, 1], timings)
    rollout = generate_flops(100, 2, 8, [2, 2], [3, 1])
    update = train_flops(100, 2, 8, [5, 3], epochs=2)
    assert perf["perf/rollout_tokens_per_s"] == 8.0  # 4 generated tokens in 0.5 s
    assert perf["perf/update_tokens_per_s"] == 64.0  # 8 tokens, 2 epochs, 0.25 s
    assert perf["perf/samples_per_s"] == 2.0
    assert perf["perf/tflops_per_s"] == pytest.approx((rollout + update) / 1e12)
    assert perf["perf/mfu"] == pytest.approx((rollout + update) / 1e3)  # a peak of 1e-9 TFLOP/s = 1e3 FLOP/s
    assert perf["perf/mfu_rollout"] == pytest.approx(rollout / 0.5 / 1e3)
    assert perf["perf/mfu_update"] == pytest.approx(update / 0.25 / 1e3)
    assert perf["perf/peak_rss_mib"] == pytest.approx(peak_rss_mib(), rel=0.5) and perf["perf/peak_rss_mib"] > 10
    assert "perf/gpu_peak_mib" not in perf


def test_without_a_peak_or_a_shape_mfu_and_flops_are_left_out():
    timings = {"rollout_s": 0.5, "update_s": 0.0, "s_per_step": 1.0}  # a phase timed at 0 s has no rate
    perf = Throughput(ModelShape(100.0, 2, 8), 1, None, None).measure([2], [3], timings)
    assert "perf/mfu" not in perf and "perf/tflops_per_s" in perf and "perf/update_tokens_per_s" not in perf
    assert "perf/tflops_per_s" not in Throughput(None, 1, 10.0, None).measure([2], [3], timings)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="reads the GPU's peak memory")
def test_gpu_peak_memory_of_the_step():
    device = torch.device("cuda")
    block = torch.empty(64 * 2**20, dtype=torch.uint8, device=device)
    perf = Throughput(None, 1, None, device).measure([1], [1], {"rollout_s": 1.0, "update_s": 1.0, "s_per_step": 1.0})
    assert perf["perf/gpu_peak_mib"] >= 64
    del block


def test_under_ray_the_peak_is_the_learners_gpu_times_the_gpus_reserved(tmp_path):
    """Ray: no GPU in the driver; the learners' rank 0 names its GPU, and the step's FLOPs ran on every GPU the
    learners and rollout workers reserve (here 2 x 1 + 2 x 0.5 = 3 H100s at 989.4 TFLOP/s in bfloat16)."""
    from rlvr.config import load_config
    from rlvr.train.setup import run_gpus, throughput

    class Learner:
        def gpu_name(self):
            return "NVIDIA H100 80GB HBM3"

    cfg = load_config(None, ["model.dtype=bfloat16", "distributed.backend=ray", "distributed.learners=2",
                             "distributed.learner_gpus=1", "distributed.rollout_workers=2",
                             "distributed.rollout_gpus=0.5"])
    assert run_gpus(cfg) == 3.0
    assert throughput(cfg, tmp_path, Learner()).peak == pytest.approx(3 * 989.4)
    assert throughput(cfg, tmp_path, object()).peak is None  # a learner that names no GPU: no MFU
    assert throughput(load_config(None, []), tmp_path, Learner()).peak is None  # one process on a CPU
    stated = load_config(None, ["log.peak_tflops=100", "distributed.backend=ray"])
    assert throughput(stated, tmp_path, Learner()).peak == 100
