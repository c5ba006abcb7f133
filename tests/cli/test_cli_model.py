"""Bad model settings (device, dtype, attention, LoRA) fail before any work: one line, exit code 2, nothing written."""

import pytest
import yaml

from rlvr.cli import main
from rlvr.models import placement


@pytest.fixture
def no_native_bf16(monkeypatch):
    monkeypatch.setattr(placement, "cpu_supports_bf16", lambda: False)


@pytest.mark.parametrize("sets, message", [
    (["model.device=cuda"], "model.device=cuda: "),
    (["model.device=cuda:3"], "model.device=cuda:3: "),
    (["model.device=tpu"], "model.device: unknown device 'tpu'"),
    (["model.dtype=float16"], "model.dtype=float16 needs a CUDA device"),
    (["model.dtype=bfloat16"], "model.dtype=bfloat16: this CPU has no native bfloat16"),
    (["model.dtype=half"], "model.dtype: unknown dtype 'half'"),
    (["model.attn_implementation=flash_attention_2"], "model.attn_implementation=flash_attention_2 needs"),
    (["model.lora.r=-2"], "model.lora.r must be >= 0"),
    (["model.lora.r=8", "algorithm.advantage=gae"], "PPO's value model on a LoRA policy"),
])
def test_bad_model_settings_exit_2(tmp_path, capsys, no_native_bf16, sets, message):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"out_dir": str(tmp_path / "runs")}))
    code = main(["train", str(path), *[a for s in sets for a in ("--set", s)]])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and message in err and err.startswith("rlvr train: error: ")
    assert not (tmp_path / "runs").exists()
