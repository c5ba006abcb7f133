"""The one offline training path (`rlvr.algorithms.offline.train_offline`): AdamW with the RL
learner's betas, the schedule, the clipping rule, micro-batch accumulation invariance, and that
every offline objective (warm-start SFT, packed SFT, RFT, DPO, reward model) trains through it."""

import math
import random
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlvr.algorithms.offline as offline
from offline_data import TEST_SIZES, sort_pairs, tiny_model, tokenizer
from rlvr.algorithms.offline import OfflineConfig, train_offline
from rlvr.algorithms.optim import clip_gradients, lr_factor
from rlvr.algorithms.packing import PackedSFTConfig, train_sft_packed
from rlvr.algorithms.preference import PreferenceConfig, train_preference
from rlvr.algorithms.reward_model import RewardModelConfig, train_reward_model
from rlvr.rewards.reward_model import reward_model_from_lm
from rlvr.algorithms.rft import RFTConfig, train_rft
from rlvr.algorithms.sft import encode_pairs, located_pairs_from_jsonl, sft_micro_loss, train_sft
from rlvr.config import ConfigError, OptimConfig, SFTConfig, load_config
from rlvr.config.offline import NO_DEFAULT_BETA, PREFERENCE_LOSSES, warm_start_config
from rlvr.core import PREFERENCE_LOSSES as CORE_LOSSES
from rlvr.core.preference import DEFAULT_BETA
from rlvr.models import build_tiny_model
from rlvr.models.tokenizer import pad_token_id
from rlvr.rollout.base import Completion
from rlvr.tasks import get_task
from rlvr.tasks.base import Example


@pytest.mark.parametrize("kwargs, message", [
    (dict(optim=OptimConfig(lr=0.0)), "^optim.lr must be > 0, got 0.0$"),
    (dict(batch_size=0), "^batch_size must be > 0, got 0$"),
    (dict(steps=0), "^steps must be > 0, got 0$"),
    (dict(micro_batch_size=9), r"^micro_batch_size must be in 1..batch_size \(8\), got 9$"),
    (dict(optim=OptimConfig(warmup_steps=-1)), "^optim.warmup_steps must be >= 0, got -1$"),
    (dict(optim=OptimConfig(min_lr_ratio=1.5)), r"^optim.min_lr_ratio must be in \[0, 1\], got 1.5$"),
    (dict(optim=OptimConfig(schedule="step")), r"^optim.schedule: unknown 'step'; choose from \['constant', "),
])
def test_offline_config_validation(kwargs, message):
    """One line naming the key as a config file or --set writes it (the optimizer's under optim.)."""
    with pytest.raises(ConfigError, match=message):
        OfflineConfig(**kwargs).validate()


@pytest.mark.parametrize("cls, name", [(OfflineConfig, "optim.lr"), (OfflineConfig, "optim.weight_decay"),
                                       (OfflineConfig, "optim.max_grad_norm"), (OfflineConfig, "optim.min_lr_ratio"),
                                       (PreferenceConfig, "beta"), (PreferenceConfig, "eval_fraction"),
                                       (RewardModelConfig, "center_coef"), (PackedSFTConfig, "optim.lr"),
                                       (RFTConfig, "temperature"), (RFTConfig, "top_p")])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_float_option_is_refused(cls, name, value):
    """`weight_decay < 0` and `beta > 0` let inf (and `x < 0` checks NaN) through: the saved model was all NaN."""
    with pytest.raises(ValueError, match=f"^{name} must be a finite number, got {value}$"):
        load_config(None, [f"{name}={value}"], cls=cls)


def test_the_trainer_configs_name_the_core_registries():
    """The config layer holds the names of the preference losses (it imports no torch); they are the core's."""
    assert set(PREFERENCE_LOSSES) == set(CORE_LOSSES)
    assert set(NO_DEFAULT_BETA) == set(CORE_LOSSES) - set(DEFAULT_BETA)


def test_simpo_gamma_and_label_smoothing_are_checked():
    """gamma was never checked: --gamma nan trained and saved an all-NaN model; label_smoothing only at the first
    step, after the model was loaded."""
    with pytest.raises(ValueError, match="^gamma must be a finite number, got nan$"):
        PreferenceConfig(loss="simpo", gamma=math.nan).validate()
    with pytest.raises(ValueError, match=r"^gamma must be >= 0, got -1.0$"):
        PreferenceConfig(loss="simpo", gamma=-1.0).validate()
    with pytest.raises(ValueError, match=r"^label_smoothing must be in \[0, 0.5\), got 0.5$"):
        PreferenceConfig(label_smoothing=0.5).validate()
    PreferenceConfig(loss="simpo", gamma=0.0).validate()


def test_total_steps():
    assert OfflineConfig(epochs=2, batch_size=4).total_steps(10) == 6  # 4 + 4 + 2 items per epoch
    assert OfflineConfig(epochs=1, batch_size=8).total_steps(3) == 1
    assert OfflineConfig(steps=7, epochs=3).total_steps(100) == 7


def test_adamw_steps_by_hand():
    """loss = c_i * w for item i: the gradient of a batch of one is c_i whatever w is, so AdamW with
    the RL learner's (beta1, beta2) can be followed by hand; clipping at 1 turns c_i = 4 into 1."""
    c = [4.0, -0.5, 0.25]
    w = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))
    model = torch.nn.Module()
    model.w = w
    cfg = OfflineConfig(steps=5, batch_size=1, seed=3, optim=OptimConfig(lr=0.1, max_grad_norm=1.0))
    history = train_offline(model, 3, cfg, lambda idx: (sum(c[i] for i in idx) * w, {}))
    b1, b2 = OptimConfig().betas
    order = [i for e in range(2) for i in _epoch_order(3, 3, e)][:5]
    m = v = expected = 0.0
    losses = []
    for t, i in enumerate(order, start=1):
        losses.append(c[i] * expected)
        g = c[i] / (abs(c[i]) + 1e-6) if abs(c[i]) > 1 else c[i]  # torch clips by max_norm / (norm + 1e-6)
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        expected -= 0.1 * (m / (1 - b1 ** t)) / (math.sqrt(v / (1 - b2 ** t)) + 1e-8)
    assert w.item() == pytest.approx(expected, abs=1e-12)
    assert [row["loss"] for row in history] == pytest.approx(losses, abs=1e-12)  # c_i * w before the step
    assert [row["grad_norm"] for row in history] == pytest.approx([abs(c[i]) for i in order])


def _epoch_order(n, seed, epoch):
    order = list(range(n))  # the batch order of rlvr.data.stream.PromptStream
    random.Random(f"{seed}/{epoch}").shuffle(order)
    return order


def test_schedule_of_the_warm_start():
    """Warmup over 10% of the steps, then cosine down to 10% of lr; history holds the lr each step used."""
    model = torch.nn.Linear(2, 1)
    cfg = warm_start_config(SFTConfig(steps=20, batch_size=2, lr=1.0), seed=0)
    history = train_offline(model, 4, cfg, lambda idx: (model(torch.ones(len(idx), 2)).sum(), {}))
    factor = lr_factor("cosine", 2, 20, 0.1)
    assert [row["lr"] for row in history] == pytest.approx([factor(s) for s in range(20)])
    assert history[0]["lr"] == 0.5 and history[2]["lr"] == 1.0


def test_the_logged_lr_is_the_one_the_step_used():
    """The history logged the next step's lr (5e-4, 7.5e-4, 1e-3 with 4 warmup steps) instead of the one used.

    loss = w with AdamW and no clipping: the gradient is always 1, so m_hat / sqrt(v_hat) = 1 and each step
    moves w by exactly the lr it used."""
    w = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))
    model = torch.nn.Module()
    model.w = w
    moves = []
    cfg = OfflineConfig(steps=3, batch_size=1, optim=OptimConfig(lr=1e-3, warmup_steps=4, max_grad_norm=0.0))
    history = train_offline(model, 1, cfg, lambda idx: (w * len(idx), {}),
                            on_step=lambda row: moves.append(-w.item() - sum(moves)))
    assert [row["lr"] for row in history] == pytest.approx([2.5e-4, 5e-4, 7.5e-4])
    assert moves == pytest.approx([row["lr"] for row in history], rel=1e-6)


def test_clip_gradients_by_hand():
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([3.0, 4.0])
    assert clip_gradients([p], 0.0).item() == pytest.approx(5.0) and p.grad.tolist() == [3.0, 4.0]  # 0: no clipping
    assert clip_gradients([p], 1.0).item() == pytest.approx(5.0)
    assert p.grad.tolist() == pytest.approx([0.6, 0.8], rel=1e-6)
    assert clip_gradients([p], 10.0).item() == pytest.approx(1.0) and p.grad.tolist() == pytest.approx([0.6, 0.8])


def _regression_run(micro_batch_size, batch_size=4, epochs=2, seed=0):
    torch.manual_seed(0)
    x, y = torch.randn(10, 3, dtype=torch.float64), torch.randn(10, dtype=torch.float64)
    model = torch.nn.Linear(3, 1).double()
    cfg = OfflineConfig(epochs=epochs, batch_size=batch_size, micro_batch_size=micro_batch_size, seed=seed,
                        optim=OptimConfig(lr=0.1, max_grad_norm=0.5))

    def micro_loss(idx):
        err = model(x[idx]).squeeze(-1) - y[idx]
        return (err ** 2).sum(), {"abs_err": err.abs().mean().detach()}

    return model, train_offline(model, 10, cfg, micro_loss)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 10), st.integers(1, 10), st.integers(1, 3), st.integers(0, 5))
def test_accumulation_equals_full_batch(batch_size, micro, epochs, seed):
    micro = min(micro, batch_size)
    full, full_hist = _regression_run(None, batch_size, epochs, seed)
    accumulated, acc_hist = _regression_run(micro, batch_size, epochs, seed)
    for p, q in zip(full.parameters(), accumulated.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-12)
    assert len(full_hist) == epochs * math.ceil(10 / batch_size)
    assert [row["epoch"] for row in full_hist] == [e for e in range(epochs) for _ in range(math.ceil(10 / batch_size))]
    for a, b in zip(full_hist, acc_hist):
        for key in ("loss", "abs_err", "grad_norm"):
            assert a[key] == pytest.approx(b[key], abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(1, 3), st.integers(0, 5))
def test_every_epoch_visits_every_item_once(n, batch_size, epochs, seed):
    w = torch.nn.Parameter(torch.zeros(()))
    model = torch.nn.Module()
    model.w = w
    seen = []
    history = train_offline(model, n, OfflineConfig(epochs=epochs, batch_size=batch_size, seed=seed),
                            lambda idx: (seen.append(list(idx)) or w * len(idx), {}))
    per_epoch = math.ceil(n / batch_size)
    assert len(history) == epochs * per_epoch
    for e in range(epochs):
        items = [i for batch in seen[e * per_epoch: (e + 1) * per_epoch] for i in batch]
        assert sorted(items) == list(range(n))


def test_warm_start_sft_accumulation_on_a_tiny_model():
    """The warm start's padded SFT objective: micro-batches of 1 or 3 give the full-batch update."""
    tok = tokenizer()
    encoded = encode_pairs(tok, [(p["prompt"], p["chosen"]) for p in sort_pairs(8, seed=2)])
    pad_id = pad_token_id(tok)
    models = [tiny_model(tok).double() for _ in range(3)]
    for model, micro in zip(models, [None, 1, 3]):
        cfg = OfflineConfig(steps=2, batch_size=len(encoded), micro_batch_size=micro, optim=OptimConfig(lr=1e-3))
        train_offline(model, len(encoded), cfg, lambda idx, m=model: sft_micro_loss(m, [encoded[i] for i in idx], pad_id),
                      weight=lambda idx: sum(len(encoded[i][1]) for i in idx))
    for other in models[1:]:
        for p, q in zip(models[0].parameters(), other.parameters()):
            torch.testing.assert_close(p, q, rtol=0, atol=1e-10)
    assert any(not torch.equal(p, q) for p, q in zip(models[0].parameters(), tiny_model(tok).double().parameters()))


def test_sft_refuses_a_pair_longer_than_the_context_naming_its_row(tmp_path):
    """A demonstration past max_position_embeddings trained with only transformers' warning; from a file the
    error names its `file:LINE` (the `rlvr sft` / `rlvr train` preflight), else its index."""
    tok = tokenizer()
    model = build_tiny_model(tok, **TEST_SIZES, max_position_embeddings=32)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    demos = [("sort 2 1=", "1 2"), ("sort 3 1=", " ".join("1" * 20))]
    with pytest.raises(ValueError, match=r"^SFT pair 1: prompt \+ completion is 49 tokens \(9 \+ 40\), which exceeds "
                                         r"the model's max_position_embeddings \(32\)"):
        train_sft(model, tok, demos, 1, 2, 1e-3, 0)
    assert all(torch.equal(start[k], v) for k, v in model.state_dict().items())
    path = tmp_path / "sft.jsonl"
    path.write_text('{"prompt": "sort 2 1=", "completion": "1 2"}\n\n'
                    f'{{"prompt": "sort 3 1=", "completion": "{demos[1][1]}"}}\n')
    places, pairs = located_pairs_from_jsonl(path)
    assert places == [f"{path}:1", f"{path}:3"] and pairs == demos
    with pytest.raises(ValueError, match=rf"^{path}:3: prompt \+ completion is 49 tokens"):
        encode_pairs(tok, pairs, 32, places)
    assert len(encode_pairs(tok, pairs, 49, places)) == 2  # exactly the context fits


class _Engine:
    def generate(self, prompts, n, sampling):
        return [Completion(prompt=p, prompt_ids=[], token_ids=[], logprobs=[], text="1 2", finish_reason="stop")
                for p in prompts for _ in range(n)]

    def load_weights(self, named_tensors):
        pass


def test_every_offline_objective_trains_through_the_one_path(monkeypatch):
    seen = []
    accumulate = offline._accumulate
    monkeypatch.setattr(offline, "_accumulate", lambda batch, *a: seen.append(len(batch)) or accumulate(batch, *a))
    tok = tokenizer()
    pairs = sort_pairs(6, seed=0)
    demos = [(p["prompt"], p["chosen"]) for p in pairs]
    runs = {
        "warm start": lambda: train_sft(tiny_model(tok), tok, demos, 2, 3, 1e-3, 0),
        "packed sft": lambda: train_sft_packed(tiny_model(tok), tok, demos, PackedSFTConfig(batch_size=3, max_len=64)),
        "dpo": lambda: train_preference(tiny_model(tok), tok, pairs, PreferenceConfig(batch_size=3, eval_fraction=0)),
        "reward model": lambda: train_reward_model(reward_model_from_lm(tiny_model(tok)), tok, pairs,
                                                   RewardModelConfig(batch_size=3, eval_fraction=0)),
        "rft": lambda: train_rft(tiny_model(tok), tok, _Engine(), [Example("sort 2 1=", "1 2", {"digits": [2, 1]})],
                                 get_task("sort", length=2).is_correct, RFTConfig(num_samples=2, max_len=64)),
    }
    for name, run in runs.items():
        seen.clear()
        run()
        assert seen, f"{name} did not train through train_offline"


def test_no_other_optimizer_or_clipping_in_the_package():
    """AdamW and clipping are built in one place; the trainers reach them only through the one path."""
    root = Path(offline.__file__).parents[1]
    for path in root.rglob("*.py"):
        text = path.read_text()
        if path.name != "optim.py":
            assert "clip_grad_norm_" not in text and "optim.AdamW" not in text, path
        if "build_optimizer(" in text and path.name != "optim.py":
            assert path.relative_to(root).as_posix() in ("algorithms/offline.py", "train/learner.py"), path
