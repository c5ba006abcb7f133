import pytest
import torch
from safetensors.torch import load_file

from rlvr.models import (PRESETS, build_char_tokenizer, build_tiny_model, load_model, load_model_and_tokenizer,
                         load_tokenizer, make_tiny_model_dir, save_model)


def test_folder_is_an_ordinary_hf_checkpoint(model_dir):
    names = {p.name for p in model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not any(name.endswith(".bin") for name in names)


def test_save_load_is_bit_identical(model_dir, tmp_path):
    model, tok = load_model_and_tokenizer(model_dir)
    ids = torch.tensor([tok("sort 3 9 1 4\n")["input_ids"]])
    with torch.no_grad():
        logits = model(ids).logits
    save_model(model, tok, tmp_path / "again")
    again = load_model(tmp_path / "again")
    for (name, a), (name_b, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert name == name_b and torch.equal(a, b), name
    with torch.no_grad():
        assert torch.equal(again(ids).logits, logits)
    assert load_tokenizer(tmp_path / "again")("a b")["input_ids"] == tok("a b")["input_ids"]


def test_saved_weights_equal_built_weights(tmp_path):
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, arch="llama", seed=5, **PRESETS["test"])
    save_model(model, tok, tmp_path / "m")
    stored = load_file(tmp_path / "m" / "model.safetensors")
    for name, tensor in stored.items():
        assert torch.equal(tensor, model.state_dict()[name])


def test_seed_determines_weights_and_leaves_global_rng_alone():
    tok = build_char_tokenizer()
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = build_tiny_model(tok, seed=1, **PRESETS["test"])
    assert torch.equal(torch.random.get_rng_state(), before)
    b = build_tiny_model(tok, seed=1, **PRESETS["test"])
    c = build_tiny_model(tok, seed=2, **PRESETS["test"])
    wa, wb, wc = (m.model.embed_tokens.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_sizes_and_special_ids():
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, arch="qwen2", hidden_size=32, num_layers=3, num_heads=2,
                             intermediate_size=48, max_position_embeddings=64)
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (32, 3, 2)
    assert (cfg.intermediate_size, cfg.max_position_embeddings, cfg.vocab_size) == (48, 64, len(tok))
    assert (cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id) == (0, 1, 2)


def test_bench_preset_is_about_20m_parameters():
    tok = build_char_tokenizer()
    with torch.device("meta"):
        model = build_tiny_model(tok, **PRESETS["bench20m"])
    assert 18e6 < sum(p.numel() for p in model.parameters()) < 22e6


def test_overwrite_replaces_folder_and_leaves_no_temporaries(tmp_path):
    tok = build_char_tokenizer()
    save_model(build_tiny_model(tok, seed=1, **PRESETS["test"]), tok, tmp_path / "ckpt")
    second = build_tiny_model(tok, seed=2, **PRESETS["test"])
    save_model(second, tok, tmp_path / "ckpt")
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    assert torch.equal(load_model(tmp_path / "ckpt").model.embed_tokens.weight, second.model.embed_tokens.weight)


def test_failed_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    tok = build_char_tokenizer()
    first = build_tiny_model(tok, seed=1, **PRESETS["test"])
    save_model(first, tok, tmp_path / "ckpt")

    def crash(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(type(tok), "save_pretrained", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        save_model(build_tiny_model(tok, seed=2, **PRESETS["test"]), tok, tmp_path / "ckpt")
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    assert torch.equal(load_model(tmp_path / "ckpt").model.embed_tokens.weight, first.model.embed_tokens.weight)


def test_missing_or_bad_folder_gives_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(NotADirectoryError):
        load_tokenizer(tmp_path / "file.txt")
    (tmp_path / "config.json").write_text('{"model_type": "not-a-model"}')
    with pytest.raises(ValueError, match="could not load"):
        load_model(tmp_path)


@pytest.mark.parametrize("kwargs, match", [
    (dict(arch="gpt2"), "unknown arch"), (dict(preset="huge"), "unknown preset"),
    (dict(hidden_size=30, num_heads=4), "even integer"), (dict(num_layers=0), "positive int"),
])
def test_bad_factory_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_tiny_model_dir(tmp_path / "m", **kwargs)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_disable_dropout_makes_train_mode_forwards_deterministic(arch):
    from rlvr.models import disable_dropout

    model = build_tiny_model(build_char_tokenizer(), arch=arch, hidden_size=32, num_layers=1, num_heads=2,
                             intermediate_size=64)
    model.config.attention_dropout = 0.5
    for module in model.modules():  # attention layers copy the rate at construction
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.5
    model.train()
    ids = torch.arange(4, 20)[None]
    assert not torch.equal(model(ids).logits, model(ids).logits)  # dropout is live
    disable_dropout(model).train()
    assert torch.equal(model(ids).logits, model(ids).logits) and model.config.attention_dropout == 0.0


def test_attention_heads_read_the_config_by_hand():
    from types import SimpleNamespace

    from rlvr.models.hf import attention_heads

    plain = SimpleNamespace(num_attention_heads=4, hidden_size=64)  # no head_dim, no GQA: 64 / 4, kv = q
    assert attention_heads(plain) == (4, 4, 16)
    qwen3 = SimpleNamespace(num_attention_heads=16, hidden_size=1024, head_dim=128, num_key_value_heads=8)
    assert attention_heads(qwen3) == (16, 8, 128)  # a stated head size wins over hidden / heads
    assert attention_heads(SimpleNamespace(num_attention_heads=2, hidden_size=32, head_dim=None,
                                           num_key_value_heads=None)) == (2, 2, 16)
