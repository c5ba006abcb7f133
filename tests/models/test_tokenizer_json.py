"""A folder's tokenizer loads exactly as saved in tokenizer.json, with its chat template.

The folder mimics a qwen2 checkpoint written by another tokenizers/transformers version: a trained
byte-level BPE (with merges) whose pre-tokenizer groups digits by three, unlike the one `AutoTokenizer`
builds when it rebuilds a qwen2 tokenizer from vocab and merges.
"""

import json

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from rlvr.models import PRESETS, build_tiny_model, load_model, load_tokenizer

CORPUS = ["The year 2024 had 365 days.", "café naïve résumé – 日本語 テキスト", "  leading spaces and\ttabs\n",
          "x = 12345 + 678", "Ünïcödé ßtraße ñ", "Sort 9 3 7 1 then add 40+2=42."]
PROMPTS = ["The year 2024 had 365 days.", " two  spaces", "12345678", "日本語 café", "a\tb\nc", "x=1+22+333",
           "Ünïcödé", "   ", "naïve 3.14159", "<|im_start|>user", "emoji 🙂 ok", "Sort 9 3 7 1", "tab\t\t2",
           "line\n\nbreak", "résumé 1000000", "ß 42"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def qwen2_folder(tmp_path_factory):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    split = pre_tokenizers.Split(Regex(r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+| ?\p{L}+"), behavior="isolated")
    tok.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                 use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer)
    assert tok.get_vocab_size() > 256 + 3  # it learned merges
    folder = tmp_path_factory.mktemp("qwen2") / "model"
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    build_tiny_model(fast, arch="qwen2", seed=0, **PRESETS["test"]).save_pretrained(folder)
    fast.save_pretrained(folder)
    tok.save(str(folder / "tokenizer.json"))  # the file exactly as the tokenizers library wrote it
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "Qwen2Tokenizer"  # as a real Qwen2 folder declares
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_encodings_equal_the_saved_tokenizer_json(qwen2_folder):
    saved = Tokenizer.from_file(str(qwen2_folder / "tokenizer.json"))
    tokenizer = load_tokenizer(qwen2_folder)
    for prompt in PROMPTS:
        expected = saved.encode(prompt, add_special_tokens=False).ids
        assert tokenizer.encode(prompt, add_special_tokens=False) == expected, prompt
        assert tokenizer.decode(expected) == saved.decode(expected, skip_special_tokens=False)


def test_autotokenizer_rebuild_differs_so_the_test_can_fail(qwen2_folder):
    """The failure this guards against, reproduced: AutoTokenizer re-tokenises some prompts differently."""
    saved = Tokenizer.from_file(str(qwen2_folder / "tokenizer.json"))
    rebuilt = AutoTokenizer.from_pretrained(qwen2_folder)
    differ = [p for p in PROMPTS if rebuilt.encode(p, add_special_tokens=False)
              != saved.encode(p, add_special_tokens=False).ids]
    assert differ, "AutoTokenizer no longer rebuilds qwen2 tokenizers; the fixture needs another trap"


def test_chat_template_and_special_tokens(qwen2_folder):
    tokenizer = load_tokenizer(qwen2_folder)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert load_model(qwen2_folder).config.model_type == "qwen2"
