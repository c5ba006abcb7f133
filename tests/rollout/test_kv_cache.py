import torch

from rlvr.rollout.kv_cache import PreallocatedKVCache


def test_prefill_expands_to_groups_and_decode_writes_in_place():
    cache = PreallocatedKVCache(num_layers=1, rows=3, max_len=4)
    prompt_k = torch.arange(2 * 1 * 2 * 1, dtype=torch.float32).view(2, 1, 2, 1)  # 2 prompts, 2 columns
    cache.expand_index = torch.tensor([0, 0, 1])  # prompt 0 -> rows 0, 1; prompt 1 -> row 2
    keys, _ = cache.update(prompt_k, prompt_k + 100, 0)
    assert keys is prompt_k  # the prefill attends within its own prompts
    cache.expand_index, cache.length = None, 2
    storage = cache.keys[0]
    assert storage[:, 0, :2, 0].tolist() == [[0, 1], [0, 1], [2, 3]]
    new = torch.tensor([7.0, 8.0, 9.0]).view(3, 1, 1, 1)
    keys, values = cache.update(new, new, 0)
    assert keys.shape == (3, 1, 3, 1) and keys.data_ptr() == storage.data_ptr()  # a view, not a copy
    assert keys[:, 0, :, 0].tolist() == [[0, 1, 7], [0, 1, 8], [2, 3, 9]]
    assert values[:, 0, :2, 0].tolist() == [[100, 101], [100, 101], [102, 103]]


def test_move_rows_then_narrow():
    cache = PreallocatedKVCache(num_layers=2, rows=3, max_len=2)
    for layer in range(2):
        cache.update(torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1, 1), torch.zeros(3, 1, 1, 1), layer)
    cache.length = 1
    cache.move_rows(torch.tensor([2]), torch.tensor([0]))  # row 0 finished; row 2 takes its slot
    cache.rows = 2
    keys, _ = cache.update(torch.tensor([5.0, 6.0]).view(2, 1, 1, 1), torch.zeros(2, 1, 1, 1), 1)
    assert keys[:, 0, :, 0].tolist() == [[3, 5], [2, 6]]
    assert cache.get_seq_length() == 1 and len(cache) == 2


def test_shared_prefix_keeps_each_prompt_once_and_rows_hold_their_completions():
    cache = PreallocatedKVCache(num_layers=1, rows=3, max_len=2, shared_prefix=True)
    prompt_k = torch.arange(4, dtype=torch.float32).view(2, 1, 2, 1)  # 2 prompts, 2 columns
    cache.expand_index = torch.tensor([0, 0, 1])
    keys, _ = cache.update(prompt_k, prompt_k + 100, 0)
    assert keys is prompt_k and cache.keys[0] is None  # nothing copied to the rows
    assert cache.prefix_keys[0].tolist() == prompt_k.tolist()
    assert cache.prefix_values[0][1, 0, :, 0].tolist() == [102, 103]
    cache.expand_index = None  # the length stays 0: the rows' columns are completion columns
    new = torch.tensor([7.0, 8.0, 9.0]).view(3, 1, 1, 1)
    keys, _ = cache.update(new, new, 0)
    assert keys.shape == (3, 1, 1, 1) and keys[:, 0, :, 0].tolist() == [[7], [8], [9]]
