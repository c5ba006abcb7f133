"""`shared_engine`: the process's one vLLM engine, handed to every later run with the same settings,
architecture and tokenizer (vLLM allows one engine with sleep mode per process on a GPU). The choice is
tested here with a stand-in engine class (no vLLM needed); that a shared engine then samples as a fresh
one on the new folder is tested against vLLM in test_vllm_engine.py."""

import json

import pytest

from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model, save_model
from rlvr.rollout import vllm_engine


class StandIn:
    """What shared_engine uses of a VLLMEngine: sleep_enabled, model_path, serve_folder, close."""

    built: list["StandIn"] = []

    def __init__(self, model_path, **settings):
        self.model_path, self.settings, self.served = model_path, settings, [model_path]
        self.sleep_enabled, self.closed = settings.get("sleep_on_gpu", False), False
        StandIn.built.append(self)

    def serve_folder(self, model_path):
        assert not self.closed
        self.model_path = model_path
        self.served.append(model_path)

    def close(self):
        self.closed = True


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(vllm_engine, "_shared", None)
    monkeypatch.setattr(vllm_engine, "VLLMEngine", StandIn)
    monkeypatch.setattr(vllm_engine, "_sleeps", lambda settings: settings.get("sleep_on_gpu", False))
    StandIn.built = []


def _folder(root, name, seed=0, **sizes):
    tokenizer = build_char_tokenizer()
    return save_model(build_tiny_model(tokenizer, arch="qwen2", seed=seed, **{**PRESETS["test"], **sizes}),
                      tokenizer, root / name)


def test_a_later_run_with_the_same_settings_gets_the_engine_serving_its_folder(fresh, tmp_path):
    a, b = _folder(tmp_path, "a", seed=0), _folder(tmp_path, "b", seed=1)  # same architecture, other weights
    first = vllm_engine.shared_engine(a, dtype="float32", seed=0)
    second = vllm_engine.shared_engine(b, dtype="float32", seed=0)
    assert second is first and len(StandIn.built) == 1
    assert first.served == [a, b] and first.model_path == b


def test_other_settings_architecture_or_tokenizer_get_a_new_engine(fresh, tmp_path):
    a = _folder(tmp_path, "a")
    wider = _folder(tmp_path, "wider", hidden_size=128)
    retokenized = _folder(tmp_path, "retokenized")
    settings = json.loads((retokenized / "tokenizer_config.json").read_text())
    (retokenized / "tokenizer_config.json").write_text(json.dumps({**settings, "eos_token": "<pad>"}))
    first = vllm_engine.shared_engine(a, dtype="float32")
    assert vllm_engine.shared_engine(a, dtype="bfloat16") is not first
    second = vllm_engine.shared_engine(wider, dtype="bfloat16")
    assert second is not first and second.served == [wider]
    assert vllm_engine.shared_engine(retokenized, dtype="bfloat16") is not second
    assert len(StandIn.built) == 4
    # each engine replaced was shut down before the next started (vLLM's teardown is of process-wide state)
    assert [e.closed for e in StandIn.built] == [True, True, True, False]
    # the engine held now is the last one built: asking for it again hands it back
    assert vllm_engine.shared_engine(retokenized, dtype="bfloat16") is StandIn.built[-1]


def test_the_folder_name_and_transformers_version_do_not_count(fresh, tmp_path):
    a, b = _folder(tmp_path, "a"), _folder(tmp_path, "b")
    config = (b / "config.json").read_text()
    (b / "config.json").write_text(config.replace('"transformers_version"', '"_name_or_path": "elsewhere",\n'
                                                                            '  "transformers_version"'))
    assert vllm_engine.shared_engine(a) is vllm_engine.shared_engine(b)


def test_a_second_sleeping_engine_on_a_gpu_is_refused_before_vllm_starts(fresh, tmp_path):
    a = _folder(tmp_path, "a")
    vllm_engine.shared_engine(a, sleep_on_gpu=True, dtype="bfloat16")
    with pytest.raises(ValueError, match="one such engine per process.*enable_sleep_mode=false"):
        vllm_engine.shared_engine(a, sleep_on_gpu=True, dtype="float32")
    assert len(StandIn.built) == 1 and not StandIn.built[0].closed
    # without sleep mode the new engine does not use vLLM's CuMem allocator: allowed
    assert vllm_engine.shared_engine(a, sleep_on_gpu=False, dtype="float32") is StandIn.built[-1]
    assert len(StandIn.built) == 2


def test_release_shared_shuts_the_engine_down_and_the_next_call_builds_anew(fresh, tmp_path):
    a = _folder(tmp_path, "a")
    first = vllm_engine.shared_engine(a)
    vllm_engine.release_shared()
    assert first.closed and vllm_engine._shared is None
    vllm_engine.release_shared()  # nothing held: nothing to do
    second = vllm_engine.shared_engine(a)
    assert second is not first and not second.closed and len(StandIn.built) == 2
