"""The one pad-id rule: the tokenizer's pad token, else its EOS."""

from types import SimpleNamespace

from rlvr.models.tokenizer import pad_token_id


def test_pad_token_id_prefers_pad_then_eos():
    assert pad_token_id(SimpleNamespace(pad_token_id=0, eos_token_id=2)) == 0  # 0 is a real id, not "missing"
    assert pad_token_id(SimpleNamespace(pad_token_id=None, eos_token_id=2)) == 2
