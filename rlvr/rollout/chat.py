"""An episode's messages as token ids, turn by turn, through the model's chat template.

The model's own tokens are never re-rendered: each turn appends what the engine sampled, then the ids of
what the template writes between the end of that assistant message and the start of the next one (the
end-of-turn marker, the environment's observation messages, the next generation prompt). Those are found
the way TRL's GRPOTrainer finds a tool response's ids (`_get_tool_suffix_ids`): the template renders the
history with and without the new messages, and the suffix is the difference. That needs a template whose
rendering of a history is a prefix of its rendering of any longer one (ChatML templates such as Qwen2.5's
and SmolLM2's, and rlvr's char template, are); one that rewrites earlier turns (Qwen3 drops past <think>
blocks) is refused with one line (`TemplateError`) at the first episode.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlvr.rollout.environment import Message


class TemplateError(ValueError):
    """The chat template cannot render an episode turn by turn (no template, or not prefix-stable)."""


class ChatRenderer:
    """Renders an episode's messages with `tokenizer`'s chat template; `tools` (JSON schemas, as Hugging Face
    chat templates take them) are passed to templates that describe tools in their system prompt."""

    def __init__(self, tokenizer: Any, tools: Sequence[dict] | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError("an environment's episodes are rendered with the model's chat template, and this "
                                "tokenizer has none")
        self.tokenizer = tokenizer
        self.tools = list(tools) if tools else None

    def render(self, messages: Sequence[Message], generation_prompt: bool) -> str:
        kwargs = {"tools": self.tools} if self.tools else {}
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                  add_generation_prompt=generation_prompt, **kwargs)

    def encode(self, text: str) -> list[int]:
        """Ids of rendered text: the template wrote its special tokens itself, so none are added."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """The first prompt of an episode: its reset messages and the generation prompt."""
        return self.encode(self.render(messages, generation_prompt=True))

    def suffix_ids(self, seen: Sequence[Message], reply: str, end_token: str | None,
                   new: Sequence[Message]) -> list[int]:
        """Ids that follow the model's reply to `seen` (its text `reply`; `end_token`, the special token it
        ended with, e.g. <|im_end|>, or None) up to the generation prompt of its next turn, with the messages
        `new` in between. The end token the model sampled is its own; where the template writes it, it is
        not written again."""
        before = self.render(seen, generation_prompt=True) + reply
        after = self.render([*seen, {"role": "assistant", "content": reply}, *new], generation_prompt=True)
        if not after.startswith(before):
            raise TemplateError("this chat template rewrites earlier turns when a conversation grows (it is not "
                                "prefix-stable), so an episode cannot be rendered turn by turn; use a model whose "
                                "template renders each message once (ChatML, e.g. Qwen2.5, SmolLM2)")
        suffix = after[len(before):]
        if end_token and suffix.startswith(end_token):
            suffix = suffix[len(end_token):]
        return self.encode(suffix)
