"""LoRA via PEFT: adapters-only training, the reference as the base with adapters disabled, merged weights
for an engine, adapter + merged saves, and an exact round trip."""

import copy
import subprocess
import sys
import warnings

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config import ConfigError, LoRAConfig, ModelConfig
from rlvr.models import load_model, load_tokenizer
from rlvr.models import placement
from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model
from rlvr.models.lora import add_lora, merged_named_weights
from rlvr.models.prefix import _checkpointing
from rlvr.models.placement import load_policy, load_reference, save_policy
from rlvr.rollout.hf_engine import HFEngine

IDS = torch.tensor([[1, 5, 9, 12, 7, 4, 30], [1, 22, 3, 8, 2, 0, 0]])
MASK = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])


def lora_cfg(**lora) -> ModelConfig:
    return ModelConfig(lora=LoRAConfig(r=4, alpha=8.0, **lora))


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS, attention_mask=MASK).logits


def trained_policy(model_dir, steps: int = 3):
    """A LoRA policy after a few AdamW steps, so B != 0 and the adapters change the output."""
    torch.manual_seed(0)
    policy = load_policy(lora_cfg(), model_dir).train()
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(steps):
        optimizer.zero_grad()
        policy(input_ids=IDS, attention_mask=MASK, labels=IDS).loss.backward()
        optimizer.step()
    return policy.eval()


def test_only_adapters_train(model_dir):
    policy = load_policy(lora_cfg(), model_dir)
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert len(trainable) == 2 * 7 * policy.get_base_model().config.num_hidden_layers  # A, B x 7 linears x layers
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    after = dict(trained_policy(model_dir).named_parameters())
    changed = {n for n in before if not torch.equal(before[n], after[n].detach())}
    assert changed and changed <= set(trainable)
    assert any(".lora_B." in n for n in changed)


def test_fresh_adapters_start_at_the_base(model_dir):
    assert torch.equal(logits(load_policy(lora_cfg(), model_dir)), logits(load_model(model_dir)))


def test_reference_is_the_base_with_adapters_disabled(model_dir):
    policy = trained_policy(model_dir)
    reference = load_reference(lora_cfg(), policy, model_dir)
    base = logits(load_model(model_dir))
    assert torch.equal(logits(reference), base)
    assert not torch.allclose(logits(policy), base, atol=1e-3)  # the adapters matter, and are back on
    assert sum(p.numel() for p in policy.parameters()) < 2 * sum(p.numel() for p in load_model(model_dir).parameters())


def test_merged_weights_equal_peft_merge_and_give_the_same_logits(model_dir):
    policy = trained_policy(model_dir)
    snapshot = {n: p.detach().clone() for n, p in policy.named_parameters()}
    merged = merged_named_weights(policy)
    assert all(torch.equal(snapshot[n], p) for n, p in policy.named_parameters())  # not mutated
    peft_merged = copy.deepcopy(policy).merge_and_unload().state_dict()
    assert merged.keys() == peft_merged.keys()
    assert all(torch.equal(merged[name], peft_merged[name]) for name in merged)
    engine = HFEngine(load_model(model_dir), load_tokenizer(model_dir))
    engine.load_weights(merged.items())  # names are the plain model's
    torch.testing.assert_close(logits(engine.model), logits(policy), rtol=1e-5, atol=1e-5)


def test_adapter_weights_are_the_saved_adapter_file(model_dir, tmp_path):
    """What a LoRA-serving engine (vLLM) receives: exactly the tensors and names PEFT saves."""
    policy = trained_policy(model_dir)
    sent = dict(placement.engine_weights(policy, adapters=True))
    save_policy(policy, load_tokenizer(model_dir), tmp_path / "final_model", tmp_path / "final_adapter")
    saved = load_file(str(tmp_path / "final_adapter" / "adapter_model.safetensors"))
    assert sent.keys() == saved.keys() and all(torch.equal(sent[k], saved[k]) for k in saved)
    assert all(k.startswith("base_model.model.") and k.endswith((".lora_A.weight", ".lora_B.weight")) for k in sent)


def test_save_adapter_and_merged_then_restore_exactly(model_dir, tmp_path):
    policy = trained_policy(model_dir)
    save_policy(policy, load_tokenizer(model_dir), tmp_path / "final_model", tmp_path / "final_adapter")
    assert (tmp_path / "final_adapter" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "final_adapter" / "model.safetensors").exists()  # adapters only
    restored = load_policy(lora_cfg(), model_dir, adapter=tmp_path / "final_adapter")
    assert all(torch.equal(a, b) for a, b in zip(policy.state_dict().values(), restored.state_dict().values()))
    assert [n for n, p in restored.named_parameters() if p.requires_grad] == \
        [n for n, p in policy.named_parameters() if p.requires_grad]  # trainable again, same order
    torch.testing.assert_close(logits(load_model(tmp_path / "final_model")), logits(policy), rtol=1e-5, atol=1e-5)
    assert load_tokenizer(tmp_path / "final_model").encode("3 1 2") == load_tokenizer(model_dir).encode("3 1 2")


def test_unknown_target_modules_is_a_config_error(model_dir):
    with pytest.raises(ConfigError, match="model.lora"):
        load_policy(lora_cfg(target_modules=["no_such_proj"]), model_dir)


def test_bfloat16_lora_keeps_float32_adapters(model_dir, monkeypatch):
    monkeypatch.setattr(placement, "cpu_supports_bf16", lambda: True)  # autocast emulates bf16 on any CPU
    m = lora_cfg()
    m.dtype = "bfloat16"
    policy = load_policy(m, model_dir)
    out = policy(input_ids=IDS, attention_mask=MASK, labels=IDS)
    assert out.logits.dtype == torch.bfloat16
    out.loss.backward()
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.parameters() if p.requires_grad)


def test_peft_is_imported_only_for_lora():
    code = "import sys, rlvr.train.loop, rlvr.cli; assert 'peft' not in sys.modules, 'peft imported'"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-500:]


def test_missing_peft_is_one_line(monkeypatch):
    real = placement.importlib.util.find_spec
    monkeypatch.setattr(placement.importlib.util, "find_spec", lambda name: None if name == "peft" else real(name))
    with pytest.raises(ConfigError, match=r"model.lora.r > 0 needs PEFT: pip install 'rlvr\[peft\]'"):
        placement.resolve_placement(lora_cfg())


def test_a_lora_policy_prints_no_deprecation_warning():
    """Every LoRA run printed transformers' FutureWarning about `is_gradient_checkpointing` (read by PEFT when it
    wraps the model, and by the shared-prompt forward on the PEFT model): code that is not the user's."""
    model = build_tiny_model(build_char_tokenizer(), **PRESETS["test"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        policy = add_lora(model, LoRAConfig(r=4))
        assert _checkpointing(policy) is False
        policy.get_base_model().activation_checkpointing_enable()
        assert _checkpointing(policy) is True
