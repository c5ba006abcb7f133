"""Sequence packing: bin packing, row layout, block-diagonal masks, and exact equivalence with
running every document on its own."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_data import sort_pairs, tiny_model, tokenizer
from rlvr.algorithms.common import completion_logprobs
from rlvr.rollout.batch import encode_prompt_completion
from rlvr.algorithms.packing import (
    PAD_DOC, Document, PackedSFTConfig, block_causal_mask, encode_documents, first_fit_decreasing,
    pack_documents, packed_logits, packed_nll, resolve_route, train_sft_packed,
)
from rlvr.models.varlen import segment_bounds, varlen_sdpa_attention
from rlvr.models import tiny_config
from rlvr.config import OptimConfig

PAIRS = [("sort 3 1 2=", "1 2 3"), ("sort 9 0=", "0 9"), ("sort 5 5 1 7 2 2 0=", "0 1 2 2 5 5 7"), ("s=", "1")]


# --- bin packing ---------------------------------------------------------------------------------

def test_first_fit_decreasing_by_hand():
    # decreasing order 5, 4, 3, 2, 1 into capacity 6: 5 -> bin 0, 4 -> bin 1, 3 -> bin 2,
    # 2 -> bin 1 (first with room), 1 -> bin 0
    assert first_fit_decreasing([5, 4, 3, 2, 1], 6) == [[0, 4], [1, 3], [2]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=40), st.integers(20, 50))
def test_first_fit_decreasing_properties(lengths, capacity):
    bins = first_fit_decreasing(lengths, capacity)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))  # each item exactly once
    loads = [sum(lengths[i] for i in b) for b in bins]
    assert max(loads) <= capacity
    # first fit never leaves two bins at most half full: the later one's items would have fit earlier
    assert sum(2 * load <= capacity for load in loads) <= 1


def test_too_long_document_is_an_error():
    with pytest.raises(ValueError, match="document 1 with 9 tokens"):
        first_fit_decreasing([3, 9], 8)


# --- row layout and mask --------------------------------------------------------------------------

def test_pack_documents_layout_by_hand():
    a = Document((10, 11, 12), (False, True, True))
    b = Document((20, 21), (False, True))
    c = Document((30, 31, 32, 33), (False, False, True, True))
    # first fit decreasing into rows of 5: c -> row 0, a -> row 1, b -> row 1 (3 + 2 = 5);
    # rows are as wide as the fullest one (5), so row 0 gets one pad token
    batch = pack_documents([a, b, c], max_len=5, pad_id=0)
    assert batch.input_ids.tolist() == [[30, 31, 32, 33, 0], [10, 11, 12, 20, 21]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 3, 0], [0, 1, 2, 0, 1]]
    assert batch.doc_ids.tolist() == [[0, 0, 0, 0, PAD_DOC], [0, 0, 0, 1, 1]]
    # position t predicts t + 1 inside its document; 12 never predicts 20, padding predicts nothing
    assert batch.labels.tolist() == [[31, 32, 33, 0, 0], [11, 12, 0, 21, 0]]
    assert batch.label_mask.tolist() == [[False, True, True, False, False], [True, True, False, True, False]]
    assert batch.num_targets.item() == 5
    assert pack_documents([a], max_len=100, pad_id=0).input_ids.shape == (1, 3)  # never padded to max_len


def test_block_causal_mask_by_hand():
    mask = block_causal_mask(torch.tensor([[0, 0, 1, PAD_DOC]]))
    expected = torch.tensor([[1, 0, 0, 0],
                             [1, 1, 0, 0],
                             [0, 0, 1, 0],
                             [0, 0, 0, 1]], dtype=torch.bool)
    assert mask.shape == (1, 1, 4, 4)
    assert torch.equal(mask[0, 0], expected)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=6), st.integers(0, 5))
def test_block_causal_mask_property(doc_lengths, pad):
    doc_ids = torch.tensor([d for d, n in enumerate(doc_lengths) for _ in range(n)] + [PAD_DOC] * pad)[None]
    mask = block_causal_mask(doc_ids)[0, 0]
    L = doc_ids.shape[1]
    for i in range(L):
        for j in range(L):
            assert bool(mask[i, j]) == (doc_ids[0, i] == doc_ids[0, j] and j <= i)
    assert bool(mask.diagonal().all())  # no all-masked softmax row


def test_document_validation():
    with pytest.raises(ValueError, match="same length"):
        Document((1, 2), (True,))
    with pytest.raises(ValueError, match="at least 2 tokens"):
        Document((1,), (True,))
    with pytest.raises(ValueError, match="no documents"):
        pack_documents([], 8, 0)


def test_encode_documents_masks_the_prompt():
    tok = tokenizer()
    (doc,) = encode_documents(tok, [("sort 2 1=", "1 2")])
    prompt, completion = encode_prompt_completion(tok, "sort 2 1=", "1 2")
    assert doc.input_ids == tuple(prompt + completion)
    assert doc.loss_mask == (False,) * len(prompt) + (True,) * len(completion)
    assert doc.input_ids[-1] == tok.eos_token_id and doc.loss_mask[-1]


# --- equivalence with unpacked documents ------------------------------------------------------------

def _per_document_logits(model, batch):
    """(packed row, document id, logits of that document run alone)."""
    out = []
    for r in range(batch.input_ids.shape[0]):
        for d in batch.doc_ids[r].unique().tolist():
            if d != PAD_DOC:
                sel = batch.doc_ids[r] == d
                out.append((r, sel, model(input_ids=batch.input_ids[r][sel][None]).logits[0]))
    return out


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("route", ["varlen", "mask", "position_ids"])
def test_packed_logits_equal_unpacked_float64(arch, route):
    tok = tokenizer()
    model = tiny_model(tok, arch).double()
    batch = pack_documents(encode_documents(tok, PAIRS), max_len=40, pad_id=tok.pad_token_id)
    assert batch.input_ids.shape[0] < len(PAIRS)  # documents really share rows
    with torch.no_grad():
        logits = packed_logits(model, batch, route)
        for r, sel, alone in _per_document_logits(model, batch):
            torch.testing.assert_close(logits[r][sel], alone, rtol=0, atol=1e-12)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("route", ["auto", "mask"])
def test_packed_logits_equal_unpacked_float32(impl, route):
    tok = tokenizer()
    model = tiny_model(tok)
    model.config._attn_implementation = impl
    batch = pack_documents(encode_documents(tok, PAIRS), max_len=40, pad_id=tok.pad_token_id)
    with torch.no_grad():
        logits = packed_logits(model, batch, route)  # mask: additive for eager, bool for sdpa
        for r, sel, alone in _per_document_logits(model, batch):
            torch.testing.assert_close(logits[r][sel], alone, rtol=0, atol=1e-5)
    assert model.config._attn_implementation == impl  # the varlen swap is undone


def test_auto_route():
    tok = tokenizer()
    model = tiny_model(tok)
    for impl, expected in [("sdpa", "varlen"), ("eager", "varlen"), ("flash_attention_2", "position_ids")]:
        model.config._attn_implementation = impl
        assert resolve_route(model, "auto") == expected
    assert resolve_route(model, "mask") == "mask"


def test_varlen_with_grouped_query_attention():
    tok = tokenizer()
    config = tiny_config(tok, arch="llama", hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128)
    config.num_key_value_heads = 2  # two query heads share each key/value head
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float64, attn_implementation="sdpa")
    batch = pack_documents(encode_documents(tok, PAIRS), max_len=40, pad_id=tok.pad_token_id)
    with torch.no_grad():
        logits = packed_logits(model, batch, "varlen")
        for r, sel, alone in _per_document_logits(model, batch):
            torch.testing.assert_close(logits[r][sel], alone, rtol=0, atol=1e-12)


def test_segment_bounds_and_varlen_errors():
    assert segment_bounds(torch.tensor([0, 1, 2, 0, 1, 0])) == [0, 3, 5, 6]
    with pytest.raises(ValueError, match="must start at 0"):
        segment_bounds(torch.tensor([1, 2, 0]))
    q = torch.zeros(1, 2, 4, 8)
    with pytest.raises(ValueError, match="needs `packed_segments`"):
        varlen_sdpa_attention(torch.nn.Module(), q, q, q, None)
    with pytest.raises(ValueError, match="one flattened row"):
        varlen_sdpa_attention(torch.nn.Module(), q.expand(2, -1, -1, -1), q, q, None, packed_segments=[0, 4])
    with pytest.raises(ValueError, match="sliding window"):
        varlen_sdpa_attention(torch.nn.Module(), q, q, q, None, sliding_window=2, packed_segments=[0, 1, 4])


@pytest.mark.parametrize("route", ["varlen", "mask"])
def test_packed_nll_and_gradient_equal_padded_batch(route):
    tok = tokenizer()
    packed_model = tiny_model(tok).double()
    padded_model = copy.deepcopy(packed_model)
    batch = pack_documents(encode_documents(tok, PAIRS), max_len=40, pad_id=tok.pad_token_id)
    nll, count = packed_nll(packed_model, batch, route)
    nll.backward()
    encoded = [encode_prompt_completion(tok, p, c) for p, c in PAIRS]
    logps, lengths = completion_logprobs(padded_model, [p for p, _ in encoded], [c for _, c in encoded],
                                         tok.pad_token_id)
    (-logps.sum()).backward()
    assert count.item() == lengths.sum().item() == sum(len(c) for _, c in encoded)
    torch.testing.assert_close(nll, -logps.sum(), rtol=0, atol=1e-10)
    for (name, p), q in zip(packed_model.named_parameters(), padded_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-10, msg=name)


def test_unknown_route_is_an_error():
    tok = tokenizer()
    batch = pack_documents(encode_documents(tok, PAIRS[:1]), 40, tok.pad_token_id)
    with pytest.raises(ValueError, match="unknown packing route"):
        packed_logits(tiny_model(tok), batch, "dense")
    with pytest.raises(ValueError, match=r"^route: unknown 'dense'; choose from \['auto', 'varlen'"):
        PackedSFTConfig(route="dense").validate()


# --- packed SFT -------------------------------------------------------------------------------------

def test_train_sft_packed_learns():
    torch.manual_seed(0)
    tok = tokenizer()
    model = tiny_model(tok)
    pairs = [(p["prompt"], p["chosen"]) for p in sort_pairs(128, seed=0)]
    result = train_sft_packed(model, tok, pairs, PackedSFTConfig(optim=OptimConfig(lr=3e-3), epochs=3, batch_size=32,
                                                                 max_len=128))
    history = result["history"]
    assert len(history) == 3 * 4
    assert history[-1]["loss"] < 0.75 * history[0]["loss"]
    assert all(0 < row["pack_fill"] <= 1 for row in history)


def test_train_sft_packed_micro_batches_match_full_batch():
    tok = tokenizer()
    pairs = [(p["prompt"], p["chosen"]) for p in sort_pairs(12, seed=1)]
    models = [tiny_model(tok).double() for _ in range(2)]
    for model, micro in zip(models, [None, 5]):
        cfg = PackedSFTConfig(optim=OptimConfig(lr=1e-3, max_grad_norm=0.0), batch_size=12, micro_batch_size=micro,
                              max_len=64)
        train_sft_packed(model, tok, pairs, cfg)
    for p, q in zip(*(m.parameters() for m in models)):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-10)


def test_train_sft_packed_rejects_empty_and_too_long():
    tok = tokenizer()
    with pytest.raises(ValueError, match="no \\(prompt, completion\\) pairs"):
        train_sft_packed(tiny_model(tok), tok, [])
    with pytest.raises(ValueError, match="longer than max_len=8"):
        train_sft_packed(tiny_model(tok), tok, PAIRS, PackedSFTConfig(max_len=8))
