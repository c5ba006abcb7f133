"""`rlvr eval` end to end on a tiny model built here (nothing downloaded), with the real HFEngine."""

import argparse
import importlib.util
import json

import pytest
import torch

from rlvr.cli import main
from rlvr.commands.eval import add_parser, run_eval
from rlvr.commands.task_options import task_from_cli
from rlvr.models import make_tiny_model_dir


def test_eval_command_on_tiny_model(tmp_path, capsys):
    model = make_tiny_model_dir(tmp_path / "tiny", num_layers=1, hidden_size=32, num_heads=2,
                                intermediate_size=64)
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    out = tmp_path / "graded.jsonl"
    args = parser.parse_args(["eval", "--model", str(model), "--task", "countdown", "--task-option", "template=plain",
                              "--task-option", "n_numbers=3", "--num-examples", "3", "--n", "2",
                              "--max-new-tokens", "6", "--out", str(out)])
    results = run_eval(args)
    greedy, sampled = results["greedy"], results["sampled (n=2, T=1)"]
    assert greedy["prompts"] == sampled["prompts"] == 3
    assert sampled["mean_length"] <= 6
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["mode"] for r in rows] == ["greedy"] * 3 + ["sampled"] * 6
    for mode, metrics in (("greedy", greedy), ("sampled", sampled)):  # the table agrees with the jsonl
        mine = [r for r in rows if r["mode"] == mode]
        assert metrics["accuracy"] == sum(r["correct"] for r in mine) / len(mine)
        assert metrics["truncation_rate"] == sum(r["finish_reason"] == "length" for r in mine) / len(mine)
        assert metrics["mean_length"] == sum(r["length"] for r in mine) / len(mine)
    assert "pass@2" in capsys.readouterr().out


def test_eval_thinking_budget_sweep_writes_table_and_plot(tmp_path, capsys):
    model = make_tiny_model_dir(tmp_path / "tiny", num_layers=1, hidden_size=32, num_heads=2,
                                intermediate_size=64)
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    out = tmp_path / "graded.jsonl"
    args = parser.parse_args(["eval", "--model", str(model), "--task", "countdown", "--task-option",
                              "template=plain", "--num-examples", "2", "--n", "0", "--max-new-tokens", "4", "--answer-tokens", "3",
                              "--thinking-budget", "2,5", "--out", str(out)])
    run_eval(args)
    rows = [json.loads(line) for line in (tmp_path / "thinking_budget.jsonl").read_text().splitlines()]
    assert [r["budget"] for r in rows] == [2, 5]
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in rows)
    assert (tmp_path / "thinking_budget.png").stat().st_size > 1000
    assert "budget" in capsys.readouterr().out


def test_eval_rejects_a_bad_thinking_budget(capsys):
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["eval", "--model", "m", "--task", "gsm8k", "--thinking-budget", "0,x"])
    assert "thinking budget" in capsys.readouterr().err


def _args(*argv):
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["eval", *argv])


BAD_ENGINE_FLAGS = [(["--device", "tpu"], "--device: unknown device 'tpu'"),
                    (["--dtype", "float8"], "--dtype: unknown dtype 'float8'"),
                    (["--engine", "foo"], "--engine: unknown name 'foo'; choose from ['auto', 'hf', 'vllm']")]
if importlib.util.find_spec("vllm") is None:
    BAD_ENGINE_FLAGS.append((["--engine", "vllm"], "--engine=vllm: vllm is not installed"))
if not torch.cuda.is_available():
    BAD_ENGINE_FLAGS.append((["--device", "cuda"], "--device=cuda: torch sees no CUDA device here"))


@pytest.mark.parametrize("flags, needle", BAD_ENGINE_FLAGS, ids=[" ".join(f) for f, _ in BAD_ENGINE_FLAGS])
def test_bad_device_dtype_or_engine_is_one_line_naming_the_flag(tmp_path, capsys, flags, needle):
    model = make_tiny_model_dir(tmp_path / "tiny", preset="test")
    assert main(["eval", "--model", str(model), "--task", "sort", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlvr eval: error: {needle}") and err.count("\n") == 1, err
    assert not (model / "eval_sort.jsonl").exists()


def test_eval_in_bfloat16_samples_as_the_trained_policy_does(tmp_path):
    """--dtype bfloat16: float32 weights, the engine computing under autocast, i.e. what a policy trained
    with model.dtype=bfloat16 samples (its own autocast hooks)."""
    from rlvr.commands.placement_flags import config_from_flags
    from rlvr.train.rollout import inference_engine

    def _engine(args):  # what run_eval samples with
        return inference_engine(config_from_flags(args, training=False), args.model, args.batch_size)
    from rlvr.models import load_model_and_tokenizer
    from rlvr.models.placement import autocast_forward, cpu_supports_bf16
    from rlvr.rollout import HFEngine, SamplingParams

    model_dir = make_tiny_model_dir(tmp_path / "tiny", preset="test")
    args = _args("--model", str(model_dir), "--task", "sort", "--dtype", "bfloat16")
    if not cpu_supports_bf16():  # refused as model.dtype is, naming the flag
        with pytest.raises(ValueError, match="--dtype=bfloat16: this CPU has no native bfloat16"):
            _engine(args)
        return
    engine = _engine(args)
    assert engine.autocast == torch.bfloat16 and all(p.dtype == torch.float32 for p in engine.model.parameters())
    policy, tokenizer = load_model_and_tokenizer(model_dir)
    trained = HFEngine(autocast_forward(policy, torch.device("cpu"), torch.bfloat16), tokenizer,
                       autocast=torch.bfloat16)
    params = SamplingParams(max_new_tokens=8, seed=5)
    mine, theirs = (e.generate(["sort 3 1 2\n", "sort 9 8\n"], 3, params) for e in (engine, trained))
    assert [(c.token_ids, c.logprobs) for c in mine] == [(c.token_ids, c.logprobs) for c in theirs]
    float32 = _engine(_args("--model", str(model_dir), "--task", "sort")).generate(["sort 3 1 2\n"], 3, params)
    assert [c.logprobs for c in float32] != [c.logprobs for c in mine[:3]]
    run_eval(_args("--model", str(model_dir), "--task", "sort", "--dtype", "bfloat16", "--num-examples", "4",
                   "--n", "2", "--max-new-tokens", "6"))
    assert len((model_dir / "eval_sort.jsonl").read_text().splitlines()) == 4 + 8


def test_the_default_budget_fits_the_models_context(tmp_path, capsys):
    """512 new tokens by default, capped to what a short context leaves after the longest prompt: the
    README's `rlvr eval` on the demo's model (512 positions) failed with its defaults."""
    model = make_tiny_model_dir(tmp_path / "tiny", preset="test", max_position_embeddings=40)
    argv = ["eval", "--model", str(model), "--task", "sort", "--num-examples", "3", "--n", "0"]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (model / "eval_sort.jsonl").read_text().splitlines()]
    longest = max(len(r["prompt"]) for r in rows)  # the char tokenizer: one token per character, no BOS
    assert all(r["length"] <= 40 - longest for r in rows) and any(r["length"] == 40 - longest for r in rows)
    capsys.readouterr()
    assert main([*argv, "--max-new-tokens", "512"]) == 2  # asked for explicitly: refused, not cut
    assert "exceeds the model's max_position_embeddings (40)" in capsys.readouterr().err
    short = make_tiny_model_dir(tmp_path / "short", preset="test", max_position_embeddings=8)
    assert main(["eval", "--model", str(short), "--task", "sort", "--num-examples", "3"]) == 2
    assert "fills the model's context (8 positions): evaluate a model whose config.json has a larger " \
           "max_position_embeddings" in capsys.readouterr().err


@pytest.mark.parametrize("template", ["Q: {question} A:", "{question}", "[{question}]"])
def test_a_text_task_option_is_taken_as_written(template):
    """`template='Q: {question} A:'` was "invalid YAML" and `template={question}` "expects a string, got
    {'question': None}", though any string containing {question} is a template."""
    task = task_from_cli("countdown", [f"template={template}", "n_numbers=3"], "unused")
    assert task.template == template and task.n_numbers == 3  # the other options still read as YAML
    assert task.eval_examples(1, 0)[0].prompt.startswith(template.split("{")[0])
    with pytest.raises(ValueError, match="^--task-option n_numbers: countdown option 'n_numbers' expects an int"):
        task_from_cli("countdown", [f"template={template}", "n_numbers=three"], "unused")
