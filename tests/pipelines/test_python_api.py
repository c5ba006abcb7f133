"""`from rlvr import GRPOTrainer, RLConfig`: TRL's trainer shape over rlvr's loop. 2-step runs of the tiny model
from Python: TRL reward functions get TRL's arguments (columns, conversational form), the policy's weights change,
the run folder says what trained; RLConfig maps TRL's names onto rlvr's keys; bad input is one ConfigError line
and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import rlvr
from rlvr import GRPOTrainer, RLConfig
from rlvr.config import Config, ConfigError, load_config
from rlvr.models import load_model, load_tokenizer, make_tiny_model_dir
from rlvr.rewards import REWARDS
from rlvr.tasks import get_task

ROOT = Path(__file__).resolve().parents[2]
TINY = {"eval.every": 0, "eval.samples": 2, "log.progress": False, "log.plots": False, "log.report_to": [],
        "checkpoint.every": 0, "threads": 1, "model.tiny_preset": "test"}
WORDS = ["ab", "ba", "abc", "cab", "bca", "acb", "aab", "bba", "ccb", "bac", "cca", "abb"] * 2


pytestmark = pytest.mark.usefixtures("restore_rewards")

def rows() -> list[dict]:
    return [{"prompt": f"reverse {w}=", "answer": w[::-1], "word": w} for w in WORDS]


def args(out: Path, **more) -> Config:
    return RLConfig(output_dir=str(out), max_steps=2, num_generations=4, generation_batch_size=8,
                    max_completion_length=4, learning_rate=1e-2, **{**TINY, **more})


def exact(prompts, completions, answer, **columns):
    """A TRL reward: one float per completion; the data set's other columns arrive as keyword lists."""
    exact.seen = {"prompts": prompts, "completions": completions, "answer": answer, "columns": columns}
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


def short(completions, **kwargs):
    return [1.0 - len(c) / 4 for c in completions]


def test_the_api_is_importable_from_the_top_without_loading_torch_first():
    assert {"GRPOTrainer", "RLConfig", "Trainer", "TrainResult"} <= set(rlvr.__all__)
    assert rlvr.Trainer is GRPOTrainer
    with pytest.raises(AttributeError, match="no attribute 'Trainr'"):
        rlvr.Trainr  # noqa: B018


def test_a_two_step_run_from_python(tmp_path):
    out = tmp_path / "run"
    trainer = GRPOTrainer(model="tiny", reward_funcs=[exact, short], args=args(out), train_dataset=rows(),
                          reward_weights=[1.0, 0.5])
    result = trainer.train()
    assert result.run_dir == out and result.global_step == 2 and trainer.model is result.model
    start = load_model(out / "init_model")
    moved = [n for (n, p), q in zip(result.model.named_parameters(), start.parameters()) if not torch.equal(p, q)]
    assert moved  # the policy trained (TRL's tiny-model tests assert the same)
    assert set(exact.seen["columns"]) == {"word"} and len(exact.seen["completions"]) == 8
    assert all(p.startswith("reverse ") for p in exact.seen["prompts"]) and exact.seen["answer"][0] in {
        w[::-1] for w in WORDS}
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert {"reward/task", "reward/exact", "reward/short"} <= set(steps[-1])
    assert "eval/greedy_accuracy" in result.first_eval and "eval/greedy_accuracy" in result.final_eval
    saved = load_config(out / "config.yaml")
    assert saved.task.name == "dataset" and saved.task.options["path"] == str(out / "data" / "train.jsonl")
    assert saved.task.rewards == [{"name": "exact", "weight": 1.0}, {"name": "short", "weight": 0.5}]
    assert saved.task.eval_size == 2  # a tenth of 24 rows is held out, fewer than the default 100
    assert [json.loads(line) for line in (out / "data" / "train.jsonl").read_text().splitlines()] == rows()


def test_a_conversational_data_set_and_a_loaded_model(tmp_path):
    """TRL's conversational form: prompts are message lists, and so is each completion; a loaded model is saved
    to RUN/start_model with its tokenizer (processing_class)."""
    folder = make_tiny_model_dir(tmp_path / "mine", preset="test")
    chat = [{"prompt": [{"role": "user", "content": f"reverse {w}="}], "answer": w[::-1]} for w in WORDS]
    out = tmp_path / "chat"
    trainer = GRPOTrainer(load_model(folder), exact, args(out), train_dataset=chat[:20], eval_dataset=chat[20:],
                          processing_class=load_tokenizer(folder), verifier="replace")
    trainer.train()
    assert exact.seen["prompts"][0] == [{"role": "user", "content": exact.seen["prompts"][0][0]["content"]}]
    assert exact.seen["completions"][0][0]["role"] == "assistant" and len(exact.seen["completions"]) == 8
    saved = load_config(out / "config.yaml")
    assert saved.model.path == str(out / "start_model") and (out / "start_model" / "config.json").is_file()
    assert saved.task.options["eval_path"] == str(out / "data" / "eval.jsonl") and saved.task.eval_size == 4
    assert saved.task.rewards == [{"name": "task", "weight": 0.0}, {"name": "exact", "weight": 1.0}]


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "datasets"])
def test_data_as_a_file_or_a_datasets_dataset(tmp_path, kind):
    data: object
    if kind == "jsonl":
        data = tmp_path / "d.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    elif kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        data = tmp_path / "d.parquet"
        pq.write_table(pa.Table.from_pylist(rows()), data)
    else:
        datasets = pytest.importorskip("datasets")
        data = datasets.Dataset.from_list(rows())
    trainer = GRPOTrainer("tiny", exact, args(tmp_path / "run"), train_dataset=data)
    path = trainer.args.task.options["path"]
    assert path == (str(tmp_path / "run" / "data" / "train.jsonl") if kind == "datasets" else str(data))
    assert trainer.args.task.eval_size == 2


def test_reward_functions_add_to_a_named_task_and_a_run_resumes(tmp_path):
    """Without a data set the config's task brings its data and verifier; the functions add to it."""
    out = tmp_path / "sort"
    cfg = RLConfig(ROOT / "configs" / "sort.yaml", output_dir=str(out), max_steps=2,
                   **{**TINY, "sft.steps": 0, "task.eval_size": 4, "train.batch_size": 8, "train.group_size": 4,
                      "train.mini_batch_size": 0, "checkpoint.every": 1})
    GRPOTrainer(reward_funcs=short, args=cfg).train()
    longer = RLConfig(out / "config.yaml", max_steps=3)
    result = GRPOTrainer(reward_funcs=short, args=longer).train(resume_from_checkpoint=True)
    assert result.global_step == 3
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1, 2, 3] and "reward/short" in steps[-1] and "reward/task" in steps[-1]


@pytest.mark.parametrize("name, value, key, expected", [
    ("output_dir", "runs/x", "out_dir", "runs/x"), ("learning_rate", 3e-4, "optim.lr", 3e-4),
    ("max_steps", 7, "train.steps", 7), ("num_generations", 4, "train.group_size", 4),
    ("generation_batch_size", 128, "train.batch_size", 128), ("per_device_train_batch_size", 16,
                                                                "train.micro_batch_size", 16),
    ("max_completion_length", 32, "rollout.max_new_tokens", 32), ("temperature", 0.7, "rollout.temperature", 0.7),
    ("top_p", 0.9, "rollout.top_p", 0.9), ("top_k", None, "rollout.top_k", 0), ("beta", 0.04, "algorithm.beta", 0.04),
    ("epsilon_high", 0.28, "algorithm.clip_high", 0.28), ("num_iterations", 2, "algorithm.mu", 2),
    ("loss_type", "dr_grpo", "algorithm.aggregation", "seq_sum_constant"),
    ("loss_type", "dapo", "algorithm.aggregation", "token_mean"),
    ("scale_rewards", False, "algorithm.advantage", "centered"), ("scale_rewards", "group", "algorithm.advantage", "grpo"),
    ("mask_truncated_completions", True, "algorithm.overlong_filter", True),
    ("max_grad_norm", 0.5, "optim.max_grad_norm", 0.5), ("weight_decay", 0.1, "optim.weight_decay", 0.1),
    ("adam_epsilon", 1e-6, "optim.eps", 1e-6), ("warmup_steps", 5, "optim.warmup_steps", 5),
    ("lr_scheduler_type", "cosine", "optim.schedule", "cosine"), ("bf16", True, "model.dtype", "bfloat16"),
    ("gradient_checkpointing", True, "model.gradient_checkpointing", True), ("use_vllm", False, "rollout.engine", "hf"),
    ("eval_steps", 5, "eval.every", 5), ("save_steps", 20, "checkpoint.every", 20), ("save_total_limit", 1,
                                                                                     "checkpoint.keep", 1),
    ("report_to", "none", "log.report_to", []), ("report_to", ["tensorboard"], "log.report_to", ["tensorboard"]),
    ("project", "sweep", "log.project", "sweep"), ("disable_tqdm", True, "log.progress", False),
    ("seed", 3, "seed", 3), ("train.steps", 9, "train.steps", 9), ("task.options.length", 5, "task.options",
                                                                   {"length": 5})])
def test_rlconfig_maps_trl_names_onto_rlvr_keys(name, value, key, expected):
    cfg = RLConfig(**{name: value})
    section, _, field = key.rpartition(".")
    assert getattr(getattr(cfg, section) if section else cfg, field) == expected


def test_rlconfig_pairs_and_precedence():
    cfg = RLConfig(epsilon=0.3)  # TRL: epsilon_high defaults to epsilon
    assert (cfg.algorithm.clip_low, cfg.algorithm.clip_high) == (0.3, 0.3)
    assert RLConfig(epsilon=0.2, epsilon_high=0.28).algorithm.clip_high == 0.28
    assert RLConfig(adam_beta2=0.95).optim.betas == [0.9, 0.95]
    assert RLConfig(adam_beta1=0.8, adam_beta2=0.95).optim.betas == [0.8, 0.95]
    cfg = RLConfig("sort", **{"algorithm.preset": "dapo"}, learning_rate=1e-4)  # file < preset by keyword < keyword
    assert cfg.algorithm.preset == "dapo" and cfg.algorithm.clip_high == 0.28 and cfg.optim.lr == 1e-4


@pytest.mark.parametrize("kwargs, error", [
    ({"learning_rte": 1e-3}, "RLConfig: unknown argument 'learning_rte'; did you mean 'learning_rate'?"),
    ({"learning_rate": 1e-3, "optim.lr": 1e-4}, "RLConfig: learning_rate and optim.lr both set optim.lr; give one"),
    ({"loss_type": "sapo"}, "RLConfig loss_type='sapo': rlvr has no equivalent; choose from ['grpo', 'dr_grpo'"),
    ({"scale_rewards": "batch"}, "RLConfig scale_rewards='batch': rlvr has no equivalent"),
    ({"num_generations": 3}, "train.batch_size (64) must be divisible by train.group_size (3)")])
def test_rlconfig_refuses_in_one_line(kwargs, error):
    with pytest.raises(ConfigError) as err:
        RLConfig(**kwargs)
    assert str(err.value).startswith(error) and "\n" not in str(err.value)


def _bad_rows():
    return [{"question": "no prompt"}]


@pytest.mark.parametrize("kwargs, error", [
    ({"args": {"max_steps": 2}}, "args must be an rlvr Config (RLConfig(...)), got dict"),
    ({"reward_funcs": "exact"}, "reward_funcs: 'exact' is not callable"),
    ({"reward_funcs": [exact, exact]}, "reward_funcs: two functions share a name (['exact', 'exact'])"),
    ({"reward_funcs": [exact], "reward_weights": [1.0, 2.0]}, "reward_weights has 2 weights for 1 reward functions"),
    ({"reward_funcs": [exact], "reward_weights": [float("nan")]}, "reward_weights must be a finite number, got nan"),
    ({"verifier": "drop"}, "verifier must be one of ('add', 'replace'), got 'drop'"),
    ({"model": "no/such/folder"}, "model.path: no Hugging Face model folder at 'no/such/folder' (no config.json)"),
    ({"model": "Qwen/Qwen2.5-0.5B"}, "model.path: 'Qwen/Qwen2.5-0.5B' looks like a Hugging Face Hub id"),
    ({"model": 3.5}, "model must be a folder, a model's name, 'tiny' or a transformers model, got float"),
    ({"model": "tiny:huge"}, "model 'tiny:huge': no tiny preset 'huge'; choose from"),
    ({"train_dataset": 42}, "a data set must be a list of dicts, a datasets.Dataset or a .jsonl/.json/.parquet path"),
    ({"train_dataset": _bad_rows()}, "train_dataset: row 1: no 'prompt' field (has ['question'])"),
    ({"eval_dataset": _bad_rows()}, "eval_dataset needs a train_dataset")])
def test_bad_trainer_input_is_one_line(tmp_path, kwargs, error):
    out = tmp_path / "run"
    with pytest.raises(ConfigError) as err:
        GRPOTrainer(**{"args": args(out), **kwargs})
    assert str(err.value).startswith(error) and "\n" not in str(err.value), str(err.value)
    assert not out.exists()  # a row refused is refused before the run folder is left behind


def test_a_shipped_rewards_name_is_refused_and_the_folders_data_is_not_written_over(tmp_path):
    def math(prompts, completions, **kw):
        return [0.0] * len(completions)

    with pytest.raises(ConfigError, match="'math' is the name of a reward in rlvr.rewards.REWARDS"):
        GRPOTrainer(reward_funcs=math, args=args(tmp_path / "a"))
    assert "math" in REWARDS and not hasattr(REWARDS["math"], "trl_function")
    GRPOTrainer("tiny", exact, args(tmp_path / "run"), train_dataset=rows())
    GRPOTrainer("tiny", exact, args(tmp_path / "run"), train_dataset=rows())  # the same rows: a resume may
    with pytest.raises(ConfigError, match=r"run/data/train.jsonl holds other rows .* choose another output_dir"):
        GRPOTrainer("tiny", exact, args(tmp_path / "run"), train_dataset=rows()[:5])
    assert len((tmp_path / "run" / "data" / "train.jsonl").read_text().splitlines()) == len(rows())


def test_an_embedded_models_name_and_its_chat_template(tmp_path, smollm2_folder):
    """model= takes what model.path takes: the embedded SmolLM2's name renders a conversation with its own chat
    template (its converted folder, rlvr.models.resolve_model)."""
    chat = [{"prompt": [{"role": "user", "content": f"reverse {w}="}], "answer": w[::-1]} for w in WORDS]
    trainer = GRPOTrainer("smollm2-135m-instruct", exact, args(tmp_path / "run"), train_dataset=chat)
    assert trainer.args.model.path == "smollm2-135m-instruct"
    assert trainer.args.task.options["tokenizer"] == str(smollm2_folder)
    (example,) = get_task("dataset", **trainer.args.task.options).eval_examples(1, seed=0)
    assert example.prompt == load_tokenizer(smollm2_folder).apply_chat_template(
        example.fields["prompt_messages"], tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user" in example.prompt
