"""A character-level tokenizer for tiny models, built with the `tokenizers` library.

One token per character, so a model that has to sort digits or add numbers never fights the
tokenizer. The vocabulary is stored in GPT-2 "byte-level" form (space -> "Ġ", newline -> "Ċ") inside
a BPE model with no merges. Why not a plain WordLevel model: transformers 5.x ignores the class a
checkpoint declares for some model types (`MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS` in
`transformers/models/auto/tokenization_auto.py` lists `qwen2`) and rebuilds the tokenizer as
`Qwen2Tokenizer`: a byte-level BPE made from the saved vocab and merges. A character vocabulary in
plain form has no "Ġ", so that rebuild silently drops every space. In byte-level form the rebuild
and the original tokenize identically, so the text survives `AutoTokenizer` for every architecture.
"""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, pre_tokenizers
from tokenizers.models import BPE
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)  # ids 0, 1, 2, 3

DEFAULT_ALPHABET = string.digits + string.ascii_letters + string.punctuation + " \n\t"

# The prompt template: <bos>, optional system line, the user text verbatim (tasks format their own
# prompts, e.g. "37+85="), and each assistant turn closed by <eos>. Nothing is added for the
# generation prompt: the completion starts right after the user text, which keeps sequences short.
# An environment's observation (role user or tool) is written verbatim too, so a multi-turn episode is
# prompt, answer <eos>, observation, answer <eos>, ... (`rlvr.rollout.chat`).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] + '\n' }}"
    "{% elif message['role'] in ('user', 'tool') %}{{ message['content'] }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('unknown role: ' + message['role']) }}"
    "{% endif %}"
    "{% endfor %}"
)


def _byte_map() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode map (Radford et al. 2019, `bytes_to_unicode`)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, codes)}


def _check_alphabet(alphabet: str) -> str:
    if not alphabet:
        raise ValueError("alphabet must contain at least one character")
    bad = sorted({c for c in alphabet if ord(c) > 127})
    if bad:
        raise ValueError(f"alphabet must be ASCII (one byte per character); got {bad!r}")
    specials = [s for s in SPECIAL_TOKENS if s in alphabet]
    if specials:
        raise ValueError(f"alphabet may not contain the special tokens {specials}")
    return "".join(dict.fromkeys(alphabet))  # drop duplicates, keep order


def build_char_tokenizer(alphabet: str | None = None) -> PreTrainedTokenizerFast:
    """A character-level `PreTrainedTokenizerFast`: ids 0..3 are <pad> <bos> <eos> <unk>, then one id
    per character of `alphabet` (default: digits, letters, punctuation, space, newline, tab).

    Characters outside the alphabet encode to <unk>. Encoding adds no special tokens; the chat
    template (`tokenizer.apply_chat_template`) puts <bos> in front and <eos> after assistant turns.
    """
    chars = _check_alphabet(DEFAULT_ALPHABET if alphabet is None else alphabet)
    byte_map = _byte_map()
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in chars:
        vocab[byte_map[ord(ch)]] = len(vocab)
    backend = Tokenizer(BPE(vocab=vocab, merges=[], unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def pad_token_id(tokenizer) -> int:
    """The id that pads batches: the tokenizer's pad token, else its EOS (many causal LMs define no
    pad token; padding is masked out either way, so which id fills it never changes a result)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
