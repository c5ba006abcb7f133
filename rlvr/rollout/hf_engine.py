"""A rollout engine on a plain Hugging Face causal LM (no vLLM): batched, KV-cached sampling.

What makes it faster than `model.generate(num_return_sequences=n)` on CPU:
- each prompt is prefilled once, instead of running the prompt n times;
- its keys/values are stored once per group and each decoding step's attention reads them once per
  group, not once per row (cascade attention, `rlvr.rollout.cascade`): the rows of a group attend
  together to their prompt, each row to its own completion, and the two are merged exactly. Where that
  does not apply (`cascade_applies`: a model with sliding-window or recurrent layers, an attention kernel
  other than sdpa/eager, a device other than the CPU, groups of one row) or does not pay (`cascade_saving`:
  short prompts on a narrow model) the prompt's keys/values are copied to the n rows of its group and the
  model's own attention kernel reads them;
- the KV cache is preallocated (`PreallocatedKVCache`) and written in place, not grown by torch.cat;
- a finished sequence leaves the batch at once: the last live row is moved into its slot, so the
  forward pass only ever runs on live rows;
- only the last position's logits are computed (`logits_to_keep=1`);
- tokens are drawn by inverse CDF (one random number per row, not per vocabulary entry), and a
  decoding step syncs with the host once;
- in half precision (`model.dtype: bfloat16`) one autocast region spans the whole call, so each
  float32 weight is cast once per call, not once per decoding step (frozen ones, a LoRA policy's
  base, which autocast does not keep, are cast by the engine itself).
"""

from __future__ import annotations

import math
from contextlib import contextmanager, nullcontext
from typing import Iterable, Iterator

import torch
from torch import Tensor
from torch.func import functional_call

from rlvr.core import entropy_from_logits
from rlvr.models.hf import attention_heads, cache_kwarg
from rlvr.models.prefix import KERNELS, full_attention_only
from rlvr.models.tokenizer import pad_token_id
from rlvr.rollout.base import Completion, Prompt, SamplingParams, encode_prompts, prompt_text
from rlvr.rollout.cascade import CASCADE, SharedPrefix, decoding_kernel
from rlvr.rollout.histories import Histories, keep_ended, prefill_continuing
from rlvr.rollout.kv_cache import PreallocatedKVCache, RowKeys
from rlvr.rollout.sampling import LOGPROBS_MODES, sample_next
from rlvr.rollout.stops import StopChecker, cut_at_stop


class HFEngine:
    """`RolloutEngine` on a transformers causal LM and its tokenizer.

    max_batch_size: most sequences (rows) decoded at once; None = all prompts * n in one batch.
    logprobs_mode: "raw_logprobs" (vLLM's default: log pi(token) of the unmodified model) or
        "processed_logprobs" (log-prob under the temperature-scaled, top-k/top-p filtered
        distribution actually sampled from). See `rlvr.rollout.sampling.sample_next`.
    add_special_tokens: passed to the tokenizer when encoding prompts (adds BOS for tokenizers
        whose post-processor does so; the rlvr char tokenizer adds nothing).
    autocast: the compute dtype (`model.dtype`) for a model with float32 weights, or None to run the
        model as it is. The call runs in one autocast region of that dtype: a policy whose own hooks
        autocast each forward (`rlvr.models.placement.autocast_forward`) would otherwise have every
        weight cast again at every decoding step (autocast keeps its casts only until the outermost
        region ends), 1.6x the generation time of a 20M model on AMX; a plain float32 model (a Ray
        rollout worker's copy) computes in that dtype as the trained policy does. Autocast keeps only
        the casts of weights that require grad; the frozen linear weights (a LoRA policy's base) are cast
        by the engine once per call (`frozen_linear_casts`) and passed to each step's forward.
    cascade: "auto" stores each prompt's keys/values once and decodes with cascade attention where it applies
        (`cascade_applies`) and pays (`cascade_saving`: enough prompt keys/values saved per row and layer); True
        wherever it applies (groups of two rows or more); False keeps the copy-to-every-row layout and the
        model's own kernel throughout.
    entropies: also return the entropy at each generated position of the distribution the log-probs are of
        (`logprobs_mode`; `Completion.entropies`, one softmax over the vocabulary per token): in float32 and
        processed, the training forward's entropy metric, which the learner then reads from here
        (`sampler_is_policy`).

    Weight sharing: built on the very module the trainer optimises, the engine samples from the
    current weights with no copy and `load_weights` is a no-op for those tensors.
    """

    def __init__(self, model, tokenizer, *, device: str | torch.device = "cpu",
                 max_batch_size: int | None = None, logprobs_mode: str = "raw_logprobs",
                 add_special_tokens: bool = True, autocast: torch.dtype | None = None, cascade: bool | str = "auto",
                 entropies: bool = False):
        if max_batch_size is not None and (not isinstance(max_batch_size, int) or max_batch_size < 1):
            raise ValueError(f"max_batch_size must be a positive int or None, got {max_batch_size!r}")
        if cascade not in (True, False, "auto"):
            raise ValueError(f"cascade must be True, False or 'auto', got {cascade!r}")
        if logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"unknown logprobs_mode {logprobs_mode!r}; choose from {list(LOGPROBS_MODES)}")
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.logprobs_mode = logprobs_mode
        self.add_special_tokens = add_special_tokens
        self.autocast = None if autocast in (None, torch.float32) else autocast
        self.max_positions = getattr(model.config, "max_position_embeddings", None)  # prompt + new tokens fit
        self.eos_ids = torch.tensor(sorted(_eos_ids(model, tokenizer)), dtype=torch.long, device=self.device)
        pad = pad_token_id(tokenizer)
        self.pad_id = 0 if pad is None else pad
        self._cache_kwarg = cache_kwarg(model)
        self.cascade = cascade
        self.entropies = entropies
        self._casts: dict[str, Tensor] = {}  # during a call: frozen linear weights cast to `autocast`
        # inside `reuse_histories`: the last call's sequences (read), and this call's (written)
        self._histories: Histories | None = None
        self._keeping: Histories | None = None

    # --- public API -------------------------------------------------------------------------------

    def generate(self, prompts: list[Prompt], n: int, sampling: SamplingParams) -> list[Completion]:
        """len(prompts) * n completions; those of prompt i are [i*n, (i+1)*n)."""
        prompt_ids = encode_prompts(self.tokenizer, prompts, n, sampling, self.add_special_tokens,
                                    self.max_positions)
        seed = sampling.seed if sampling.seed is not None else int(torch.randint(2**62, (1,)).item())
        generator = torch.Generator(device=self.device).manual_seed(seed)
        rows: list[tuple[list[int], list[float], str | None, bool, list[float] | None]] = []
        if self._histories is not None:
            self._keeping = Histories(self._histories.max_bytes)  # the block's cap
        was_training = self.model.training
        self.model.eval()
        try:
            region = nullcontext() if self.autocast is None else torch.autocast(self.device.type, self.autocast)
            with torch.no_grad(), region:
                self._casts = {} if self.autocast is None else frozen_linear_casts(self.model, self.autocast)
                for chunk in self._chunks(len(prompts), n):
                    rows.extend(self._run_chunk([prompt_ids[i] for i, _ in chunk],
                                                [count for _, count in chunk], sampling, generator))
        finally:
            self.model.train(was_training)
            self._casts = {}
        if self._histories is not None:
            self._histories, self._keeping = self._keeping, None
        owners = [i for i in range(len(prompts)) for _ in range(n)]
        texts = self.tokenizer.batch_decode([row[0] for row in rows], skip_special_tokens=True)
        shown = [prompt_text(self.tokenizer, p) for p in prompts]
        return [self._completion(shown[i], prompt_ids[i], row, text, sampling)
                for i, row, text in zip(owners, rows, texts)]

    @contextmanager
    def reuse_histories(self, max_bytes: float = math.inf) -> Iterator[None]:
        """Within the block, each call keeps its sequences' keys/values and the next call prefills only what its
        prompts add to them (`rlvr.rollout.histories`): a multi-turn episode's turns feed their histories back.
        Kept for one call only, at most `max_bytes` of them (past it none, and the next call prefills in full; the
        previous call's are read while a call keeps its own: twice that at most); weights must not change inside
        the block (the kept keys would be stale)."""
        self._histories = Histories(max_bytes)
        try:
            yield
        finally:
            self._histories = self._keeping = None

    def load_weights(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        """Copy tensors into the model in place, by state-dict name; unknown names raise KeyError. A PEFT
        model is the learner's own LoRA policy shared in process: it already holds the trained adapters."""
        if hasattr(self.model, "peft_config"):
            return
        state = self.model.state_dict(keep_vars=True)
        with torch.no_grad():
            for name, tensor in named_tensors:
                if name not in state:
                    raise KeyError(f"load_weights: the model has no tensor named {name!r}")
                target = state[name]
                if target.shape != tensor.shape:
                    raise ValueError(f"load_weights: {name!r} has shape {tuple(target.shape)}, "
                                     f"got {tuple(tensor.shape)}")
                if target.data_ptr() != tensor.data_ptr():  # shared module: already the same storage
                    target.copy_(tensor)

    # --- preparation ------------------------------------------------------------------------------

    def _chunks(self, num_prompts: int, n: int) -> list[list[tuple[int, int]]]:
        """Split (prompt, samples) work into batches of at most max_batch_size rows; a group larger
        than a batch is split (its prompt is then prefilled once per piece)."""
        cap = self.max_batch_size or num_prompts * n
        chunks, current, used = [], [], 0
        for prompt in range(num_prompts):
            left = n
            while left:
                take = min(left, cap - used)
                current.append((prompt, take))
                used, left = used + take, left - take
                if used == cap:
                    chunks.append(current)
                    current, used = [], 0
        return chunks + ([current] if current else [])

    # --- decoding ---------------------------------------------------------------------------------

    def _uses_cascade(self, counts: list[int], width: int) -> bool:
        """The one place that decides a chunk's layout (groups of `counts` rows, prompts padded to `width`):
        cascade attention, or prompts copied to every row."""
        if self.cascade is False or max(counts) < 2 or not cascade_applies(self.model, self.device):
            return False
        return self.cascade is True or cascade_saving(self.model.config, max(counts), width) >= CASCADE_MIN_SAVED

    def _forward(self, input_ids: Tensor, positions: Tensor, cache, attention_mask: Tensor | None, **extra) -> Tensor:
        """Next-token logits (rows, V); `extra` goes to the model's forward (and on to its attention function)."""
        mask = attention_mask
        if mask is not None and self.model.config._attn_implementation == "eager":  # eager adds a 4D mask
            mask = torch.zeros(mask.shape, dtype=self.model.dtype, device=mask.device).masked_fill(
                ~mask, torch.finfo(self.model.dtype).min)
        kwargs = dict(input_ids=input_ids, position_ids=positions, attention_mask=mask, use_cache=True,
                      logits_to_keep=1, **{self._cache_kwarg: cache}, **extra)
        # tie_weights=False: a tied output layer's cast must not replace the embedding (kept in float32)
        out = (functional_call(self.model, self._casts, (), kwargs, tie_weights=False) if self._casts
               else self.model(**kwargs))
        return out.logits[:, -1, :]  # (rows, V)

    def _prefill(self, prompt_ids: list[list[int]], counts: list[int], max_new: int, cascade: bool):
        """Left-pad the prompts and run them once; the cache keeps them once per group (cascade) or copies
        them to the rows of their groups. Returns the cache, what the decoding steps attend to (`SharedPrefix`
        or `RowKeys`), next positions (R,) and next-token logits (R, V)."""
        dev, width = self.device, max(map(len, prompt_ids))
        lengths = torch.tensor([len(p) for p in prompt_ids], device=dev)  # (B,)
        ids = torch.full((len(prompt_ids), width), self.pad_id, dtype=torch.long, device=dev)
        for b, p in enumerate(prompt_ids):
            ids[b, width - len(p):] = torch.tensor(p, device=dev)
        real = torch.arange(width, device=dev)[None, :] >= (width - lengths)[:, None]  # (B, P)
        positions = (real.long().cumsum(-1) - 1).clamp(min=0)  # (B, P)
        causal = torch.ones(width, width, dtype=torch.bool, device=dev).tril()
        eye = torch.eye(width, dtype=torch.bool, device=dev)
        # A pad query sees only itself: a row with no visible key would give NaN, then NaN values.
        mask = (causal[None] & real[:, None, :]) | eye[None]  # (B, P, P)
        counts_t = torch.tensor(counts, device=dev)
        group = torch.repeat_interleave(torch.arange(len(counts), device=dev), counts_t)  # (R,) each row's prompt
        rows, layers = int(group.numel()), self.model.config.num_hidden_layers
        cache = PreallocatedKVCache(layers, rows, max_new if cascade else width + max_new, shared_prefix=cascade)
        cache.expand_index = group
        logits = self._forward(ids, positions, cache, mask[:, None])  # (B, V)
        cache.expand_index = None
        if cascade:
            attend = SharedPrefix.of(cache.prefix_keys, cache.prefix_values, real, group, max(counts))
        else:
            cache.length = width
            attend = RowKeys.of(real[group], max_new)  # (R, P + T)
        return cache, attend, lengths[group].clone(), logits[group]

    def _run_chunk(self, prompt_ids, counts, sampling: SamplingParams, generator):
        """Sample one batch of groups. Returns per row (token_ids, logprobs, stop_reason, finished, entropies or
        None).

        Host syncs per token: one (the count of finished rows), plus the tokens' copy to the host
        only when stop strings must be checked; generated tokens and log-probs stay on the device
        until the chunk ends."""
        max_new, cascade = sampling.max_new_tokens, self._uses_cascade(counts, max(map(len, prompt_ids)))
        kept = [self._histories.longest(p) for p in prompt_ids] if self._histories and max(counts) == 1 else []
        if kept and all(length for length, _ in kept):  # every prompt continues a kept sequence
            cache, attend, positions, logits = prefill_continuing(self._forward, self.pad_id, self.device,
                                                                  self.model.config, prompt_ids, kept, max_new)
            cascade = False
        else:
            cache, attend, positions, logits = self._prefill(prompt_ids, counts, max_new, cascade)
        rows, dev = cache.rows, self.device
        owner = [g for g, count in enumerate(counts) for _ in range(count)]  # each sequence's prompt
        tokens = torch.zeros(rows, max_new, dtype=torch.long, device=dev)  # (R, T) by sequence id
        logprobs = torch.zeros(rows, max_new, device=dev)
        entropies = torch.zeros(rows, max_new, device=dev) if self.entropies else None
        lengths = torch.full((rows,), max_new, dtype=torch.long, device=dev)
        stopped = torch.zeros(rows, dtype=torch.bool, device=dev)
        stops = StopChecker(self.tokenizer, sampling.stop)
        seq = torch.arange(rows, device=dev)  # row -> sequence id
        with decoding_kernel(self.model, CASCADE) if cascade else nullcontext():
            for t in range(max_new):
                token, logprob, scored = sample_next(logits, sampling.temperature, sampling.top_k, sampling.top_p,
                                                     generator, self.logprobs_mode)
                tokens[seq, t], logprobs[seq, t] = token, logprob.float()
                if entropies is not None:  # of the distribution the log-probs are of (`logprobs_mode`)
                    entropies[seq, t] = entropy_from_logits(scored)
                done = torch.isin(token, self.eos_ids) & (not sampling.ignore_eos)  # (R',)
                if stops.stops:
                    done |= stops.hits(tokens.cpu(), seq.cpu(), t).to(dev)
                lengths[seq] = torch.where(done, t + 1, lengths[seq])  # no boolean indexing: that would sync
                stopped[seq] = stopped[seq] | done
                finished = int(done.sum())  # the one sync every step
                last = t == max_new - 1 or finished == seq.numel()
                if self._keeping is not None and (finished or last):  # before the rows' cache slots are reused
                    ended = torch.ones_like(done) if last else done
                    keep_ended(self._keeping, cache, attend, seq, ended, t, [prompt_ids[g] for g in owner], tokens)
                if last:
                    break
                if finished:
                    keep = self._compact(cache, done.cpu()).to(dev)  # (R',)
                    seq, positions, token, attend = seq[keep], positions[keep], token[keep], attend.select(keep)
                logits = self._forward(token[:, None], positions[:, None], cache, **attend.step_kwargs(cache.length))
                cache.length += 1
                positions = positions + 1
        reasons, lengths = stops.reasons, lengths.tolist()
        token_rows, logprob_rows, stopped = tokens.tolist(), logprobs.tolist(), stopped.tolist()
        entropy_rows = entropies.tolist() if entropies is not None else [None] * rows
        return [(token_rows[r][: lengths[r]], logprob_rows[r][: lengths[r]], reasons.get(r), stopped[r],
                 None if entropy_rows[r] is None else entropy_rows[r][: lengths[r]]) for r in range(rows)]

    def _compact(self, cache: PreallocatedKVCache, done: Tensor) -> Tensor:
        """Drop finished rows: live rows beyond the new end move into the holes (the cache moved in
        place); returns the index that reorders per-row tensors the same way."""
        live = int((~done).sum())
        order = torch.arange(done.numel())
        holes = torch.nonzero(done[:live]).squeeze(-1)  # finished rows that stay inside [0, live)
        movers = torch.nonzero(~done[live:]).squeeze(-1) + live  # live rows outside [0, live)
        if holes.numel():
            cache.move_rows(movers.to(self.device), holes.to(self.device))
            order[holes] = movers
        cache.rows = live
        return order[:live]

    @staticmethod
    def _completion(prompt: str, prompt_ids: list[int], row, text: str, sampling: SamplingParams) -> Completion:
        token_ids, logprobs, stop_reason, finished, entropies = row
        if stop_reason is not None:
            text = cut_at_stop(text, sampling.stop)
        return Completion(prompt=prompt, prompt_ids=list(prompt_ids), token_ids=token_ids, logprobs=logprobs,
                          text=text, finish_reason="stop" if finished else "length",
                          extra={"stop_reason": stop_reason}, entropies=entropies)


# Cascade attention costs a fixed amount per row and layer (two attention kernels and their merge instead of one)
# and saves the prompt keys/values a row no longer reads: it pays from CASCADE_MIN_SAVED saved entries per row and
# layer on (`cascade_saving`). Measured with benchmarks/bench_cascade.py (one thread, tcmalloc; docs/performance.md,
# round thirteen): on the demo's 64-wide model 13-token prompts in groups of 8 (728 saved) ran 0.94-0.98x with
# cascade in five runs, groups of 2 (416) 0.88-0.93x; from 16-token prompts (896) on it ran 1.07x and faster
# (32 tokens 1.12x, 96 tokens 1.35x); 128 wide 1.08-1.12x at 8-13 tokens (896-1,456), 512 wide 1.01-1.05x.
CASCADE_MIN_SAVED = 800


def cascade_saving(config, group: int, width: int) -> float:
    """Prompt key/value entries per row and layer that cascade attention does not read, with groups of `group`
    rows and prompts `width` tokens wide: (1 - 1/group) * width * (key/value heads * head size)."""
    _, kv_heads, head_dim = attention_heads(config)
    return (1 - 1 / group) * width * kv_heads * head_dim


def cascade_applies(model, device: torch.device) -> bool:
    """Whether cascade attention computes what the model's own kernel would: every layer attends to every
    earlier token (`full_attention_only`) with plain softmax attention (sdpa or eager kernels), in a model
    class of transformers' own (a model's remote code may not look its attention function up by
    `config._attn_implementation`). On the CPU only: its kernel is where it is measured."""
    config = model.config
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT wrapper: its model
    own_code = any(cls.__module__.startswith("transformers.models.") for cls in type(base).__mro__)
    return (device.type == "cpu" and own_code and config._attn_implementation in KERNELS
            and full_attention_only(config))


def frozen_linear_casts(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, Tensor]:
    """{name: tensor cast to `dtype`} for the float32 weights and biases of linear layers that do not
    require grad (a LoRA policy's frozen base, a tied output layer). Autocast casts a linear layer's
    float32 weight to its dtype at every use and keeps the cast for the region only for tensors that
    require grad, so in a decoding loop these would be cast again at every token; cast once here, they
    give the same products (autocast leaves a weight already in its dtype as it is)."""
    casts = {}
    for prefix, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            for name, param in module.named_parameters(recurse=False):
                if not param.requires_grad and param.dtype == torch.float32:
                    casts[f"{prefix}.{name}" if prefix else name] = param.detach().to(dtype)
    return casts


def _eos_ids(model, tokenizer) -> set[int]:
    """EOS ids from the tokenizer and the model's generation config (which may list several)."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if gen_eos is not None:
        ids.update(int(i) for i in ([gen_eos] if isinstance(gen_eos, int) else gen_eos))
    if not ids:
        raise ValueError("neither the tokenizer nor the model's generation_config defines an eos token")
    return ids
