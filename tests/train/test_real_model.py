"""The real model end to end: the embedded SmolLM2-135M-Instruct, prompted through its own chat template by the
shipped recipes, trains for two steps in the main suite. Heavy (a 134.5M-parameter model on a CPU), so one run of
each recipe, shrunk to eight samples of twelve tokens on one thread (under a minute each once the folder is cached,
under load; a second thread would wait on the other core when a test worker holds it)."""

import json

import pytest
from safetensors import safe_open

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.train.preflight import run_task

pytestmark = pytest.mark.real_model

# 2 prompts x 4 samples of 12 tokens: room for "15 + 20 = 35", so that (seed 0) a group holds a right and a wrong
# answer and the update has a gradient (at 8 tokens every answer was cut before its number: no signal)
SMALL = ["train.steps=2", "train.batch_size=8", "train.group_size=4", "train.micro_batch_size=8",
         "task.eval_size=1", "task.train_size=16", "rollout.max_new_tokens=12", "log.progress=false",
         "log.report_to=[]", "log.plots=false", "threads=1"]
SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


def test_the_recipes_prompts_are_the_models_chat_template(smollm2_folder):
    """`template` left to `auto`: the task gets the run's model's tokenizer and its chat template, never a path
    written twice; a system prompt replaces the model's default one."""
    example = run_task(load_config("smollm2_full")).eval_examples(1, seed=0)[0]
    assert example.prompt.startswith(SYSTEM + "<|im_start|>user\n" + example.fields["question"])
    assert example.prompt.endswith("\\boxed{}.<|im_end|>\n<|im_start|>assistant\n")
    own = run_task(load_config("smollm2_full", ["task.options.system_prompt=Answer in \\boxed{}."]))
    assert own.eval_examples(1, seed=0)[0].prompt.startswith("<|im_start|>system\nAnswer in \\boxed{}.<|im_end|>\n")


@pytest.mark.parametrize("recipe", ["smollm2_full", "smollm2_lora"])
def test_two_steps_of_the_shipped_recipe_train_the_real_model(recipe, smollm2_folder, tmp_path, capsys):
    run = tmp_path / "run"
    sets = [arg for kv in [f"out_dir={run}", *SMALL] for arg in ("--set", kv)]
    assert main(["train", recipe, *sets]) == 0
    out = capsys.readouterr().out
    assert "held-out greedy exact-match accuracy" in out and "heldout_family" in out and f"rlvr doctor {run}" in out
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert rows[1]["reward_std"] > 0 and rows[1]["grad_norm"] > 0  # a mixed group: the update moves the weights
    for row in (rows[0], rows[2]):
        assert {"eval/greedy_accuracy", "eval/greedy_format", "eval/heldout_family/greedy_accuracy"} <= set(row)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["prompt"].startswith(SYSTEM) for s in samples)
    name = "model.layers.0.mlp.down_proj.weight"
    with safe_open(smollm2_folder / "model.safetensors", "pt") as a, \
            safe_open(run / "final_model" / "model.safetensors", "pt") as b:
        assert not a.get_tensor(name).equal(b.get_tensor(name))  # trained (LoRA: the merged adapters)
    assert "smollm2-135m-instruct" in (run / "config.yaml").read_text()  # the name, not the cache path
