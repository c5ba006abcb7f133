"""Prompt templates: R1-Zero (think/answer tags), the tokenizer's chat template, plain text, or any
format string with a `{question}` field; `auto` (the default of the tasks that take a template) follows the
model: its chat template when its tokenizer has one, else R1-Zero. An optional system prompt goes in the chat
template's system message (or on a line of its own before the other templates)."""

from __future__ import annotations

from typing import Any

# DeepSeek-R1-Zero's template (DeepSeek-AI 2025, table 1); the prompt opens <think> for the model.
R1_ZERO = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. "
    "The Assistant first thinks about the reasoning process in the mind and then provides the User with "
    "the answer. The reasoning process is enclosed within <think> </think> and the answer is enclosed "
    "within <answer> </answer> tags, respectively, i.e., <think> reasoning process here </think> "
    "<answer> answer here </answer>.\nUser: {question}\nAssistant: <think>")
BOXED = "Please reason step by step, and put your final answer within \\boxed{}."
ANSWER_TAGS = "Think step by step, then give only the final answer inside <answer> </answer> tags."
INSTRUCTIONS = {"boxed": BOXED, "tags": ANSWER_TAGS}  # how the chat and plain templates ask for the final answer
TEMPLATES = ("auto", "r1_zero", "chat", "plain")


def load_tokenizer_option(tokenizer: Any) -> Any:
    """A tokenizer object, or a folder to load one from (the model's own folder works), or `char`: the character
    tokenizer of the tiny model that a run builds when model.path is empty (its folder does not exist yet)."""
    if tokenizer is None or hasattr(tokenizer, "apply_chat_template"):
        return tokenizer
    # on use only: transformers takes seconds to import, and reward workers import the tasks
    from rlvr.models import build_char_tokenizer, load_tokenizer

    return build_char_tokenizer() if tokenizer == "char" else load_tokenizer(str(tokenizer))


def resolve_template(template: str, tokenizer: Any) -> str:
    """`auto` as the model asks: `chat` when `tokenizer` has a chat template (an instruct model's), else `r1_zero`
    (a base model, or no tokenizer given); any other template as given."""
    if template != "auto":
        return template
    return "chat" if getattr(tokenizer, "chat_template", None) else "r1_zero"


def check_template(template: str, tokenizer: Any) -> None:
    if template == "chat":
        if tokenizer is None:
            raise ValueError("template 'chat' needs tokenizer= (a tokenizer or a model folder)")
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("template 'chat': this tokenizer has no chat_template")
    elif template not in TEMPLATES and "{question}" not in template:
        raise ValueError(f"unknown template {template!r}; choose from {list(TEMPLATES)} "
                         "or give a format string containing '{question}'")


def set_up_template(template: str, tokenizer: Any) -> tuple[str, Any]:
    """A task's `template` and `tokenizer` options as its prompts use them: the tokenizer loaded
    (`load_tokenizer_option`), `auto` resolved by it (`resolve_template`), the template checked (`check_template`)."""
    tokenizer = load_tokenizer_option(tokenizer)
    template = resolve_template(template, tokenizer)
    check_template(template, tokenizer)
    return template, tokenizer


def render_prompt(template: str, question: str, tokenizer: Any = None, instruction: str = BOXED,
                  system: str | None = None) -> str:
    """The full prompt text for `question` (`auto` resolved by `resolve_template`). `instruction` (how to state the
    final answer) is added by the chat and plain templates; R1-Zero's own text already asks for <answer> tags.
    `system`: the chat template's system message (replacing the model's default one, as any system message
    does), else a line of its own before the prompt."""
    question, template = question.strip(), resolve_template(template, tokenizer)
    if template == "chat":
        check_template(template, tokenizer)
        messages = [{"role": "user", "content": f"{question}\n\n{instruction}"}]
        messages = [{"role": "system", "content": system}, *messages] if system else messages
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    head = f"{system}\n" if system else ""
    if template == "r1_zero":
        return head + R1_ZERO.format(question=question)
    if template == "plain":
        return head + f"Question: {question}\n{instruction}\nAnswer:"
    check_template(template, tokenizer)
    return head + template.replace("{question}", question)
