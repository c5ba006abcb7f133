import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from rlvr.models import DEFAULT_ALPHABET, build_char_tokenizer
from rlvr.models.tokenizer import SPECIAL_TOKENS

# Like every HF tokenizer, the text "<eos>" encodes to the special token, so texts that spell a
# special token are not plain character sequences.
plain_text = st.text(alphabet=DEFAULT_ALPHABET, max_size=40).filter(
    lambda text: not any(special in text for special in SPECIAL_TOKENS))

TEXTS = [
    "sort 3 9 1 4\n",
    "37+85=",
    "<think>first 1, then 3\n  done</think><answer>1 3 4 9</answer>",
    "  leading and trailing spaces  ",
    "tab\tand\nnewline",
]


def test_one_token_per_character_and_exact_decode():
    tok = build_char_tokenizer()
    for text in TEXTS:
        ids = tok(text)["input_ids"]
        assert len(ids) == len(text)
        assert tok.decode(ids) == text


def test_special_token_ids_and_vocab():
    tok = build_char_tokenizer("abc")
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert len(tok) == 4 + 3
    assert tok("cab")["input_ids"] == [6, 4, 5]
    assert tok("<bos>a<eos>")["input_ids"] == [1, 4, 2]
    assert tok.decode([1, 4, 2, 0], skip_special_tokens=True) == "a"


def test_unknown_character_maps_to_unk():
    tok = build_char_tokenizer("ab")
    assert tok("azb")["input_ids"] == [4, 3, 5]


def test_chat_template_adds_bos_and_closes_assistant_turns():
    tok = build_char_tokenizer()
    prompt = tok.apply_chat_template([{"role": "user", "content": "37+85="}], tokenize=False,
                                     add_generation_prompt=True)
    assert prompt == "<bos>37+85="
    full = tok.apply_chat_template(
        [{"role": "system", "content": "add"}, {"role": "user", "content": "1+1="},
         {"role": "assistant", "content": "2"}], tokenize=False)
    assert full == "<bos>add\n1+1=2<eos>"
    ids = tok.apply_chat_template([{"role": "user", "content": "ab"}], tokenize=True)["input_ids"]
    assert ids == [tok.bos_token_id] + tok("ab")["input_ids"]


@pytest.mark.parametrize("alphabet, match", [("", "at least one"), ("abé", "ASCII"), ("ab<pad>", "special")])
def test_bad_alphabet(alphabet, match):
    with pytest.raises(ValueError, match=match):
        build_char_tokenizer(alphabet)


def test_text_survives_autotokenizer(model_dir):
    """transformers 5.x rebuilds a qwen2 folder's tokenizer as Qwen2Tokenizer (byte-level BPE); the
    byte-level vocabulary makes that rebuild tokenize exactly like the original."""
    original = build_char_tokenizer()
    loaded = AutoTokenizer.from_pretrained(model_dir)
    for text in TEXTS:
        ids = loaded(text)["input_ids"]
        assert ids == original(text)["input_ids"]
        assert loaded.decode(ids) == text
    assert loaded.apply_chat_template([{"role": "user", "content": "1 2"}], tokenize=False,
                                      add_generation_prompt=True) == "<bos>1 2"
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id) == (0, 1, 2)


@settings(max_examples=60, deadline=None)
@given(text=plain_text)
def test_any_alphabet_text_round_trips(text):
    tok = build_char_tokenizer()
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text


@pytest.fixture(scope="module")
def loaded_tokenizers(tmp_path_factory):
    from rlvr.models import make_tiny_model_dir
    out = []
    for arch in ["qwen2", "llama"]:
        path = make_tiny_model_dir(tmp_path_factory.mktemp(arch) / "m", arch=arch, preset="test")
        out.append(AutoTokenizer.from_pretrained(path))
    return out


@settings(max_examples=40, deadline=None)
@given(text=plain_text)
def test_any_alphabet_text_round_trips_through_autotokenizer(loaded_tokenizers, text):
    for tok in loaded_tokenizers:
        assert tok.decode(tok(text)["input_ids"]) == text
