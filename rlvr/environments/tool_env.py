"""`tools`: the model may call tools before it answers; its first message without a tool call is its answer,
scored by the task's verifier.

    user: Sam has 12 boxes of 7 pens ...    assistant: <tool_call>{"name": "calculator", "arguments":
    {"expression": "12 * 7"}}</tool_call>    tool: 84    assistant: Sam has \\boxed{84} pens.

Every tool call of a turn runs (`rlvr.environments.tools`: errors come back as `error: ...` observations,
counted in the step's `tool_errors`) and its output comes back as a `tool` message; the episode then goes
on. The question is the item's `question` field (a task's raw question, not its rendered prompt) with
`instruction` after it (how to state the answer, e.g. in \\boxed{}); the answer's reward is the task's verifier
(`task.reward_fn()`), `correct` its `is_correct`; an episode that runs out of turns scores 0. The tools are
described in a system message (the call format by example), and passed to chat templates that render tool
schemas themselves (Qwen2.5's).

A step's info counts the calls (`tool_calls`), those that failed (`tool_errors`) and the *correct* ones
(`tool_calls_correct`): a call that ran and whose output, as text, is the item's reference answer (the calculator
writes a whole number as an integer, so "42 - 24" gives "18"); the evaluation reports their shares.

Demonstrations (`demonstration(item, rng)`, the SFT warm start's episodes): a `calculator` call on the item's
`expression` field, exactly in the format the system message asks, then the answer in `answer_format`. An item
without a usable expression (no field, no calculator offered, or one whose value is not the reference answer)
demonstrates the reference answer alone, in one turn.
"""

from __future__ import annotations

import json
import random
from typing import Any

from rlvr.environments.base import register_environment
from rlvr.environments.tools import ToolCall, get_tools, parse_tool_calls, run_tool_call
from rlvr.rollout.environment import Message, StepResult


def tool_prompt(tools: list[Any]) -> str:
    """The system message that tells the model its tools and how to call them (Hermes' format)."""
    lines = ["You can use tools. To call one, write exactly:",
             '<tool_call>{"name": TOOL, "arguments": {ARGUMENTS}}</tool_call>',
             "and wait for its result. When you know the answer, reply without a tool call. Tools:"]
    for t in tools:
        lines.append(f"- {t.name}: {t.description} Arguments: {json.dumps(t.parameters['properties'])}")
    return "\n".join(lines)


@register_environment("tools")
class ToolEnv:
    def __init__(self, task: Any, tools: list = ("calculator",), system: str | None = None,
                 instruction: str = "", answer_format: str = "The answer is \\boxed{{answer}}.") -> None:
        if "{answer}" not in answer_format:
            raise ValueError(f"answer_format must contain {{answer}}, got {answer_format!r}")
        self.task, self.tool_list = task, get_tools(list(tools))
        self.answer_format = answer_format
        self.tools = [t.spec() for t in self.tool_list]  # for chat templates that render tool schemas
        self.system = tool_prompt(self.tool_list) if system is None else system
        self.instruction = instruction
        self.score = task.reward_fn()

    def reset(self, item: Any) -> list[Message]:
        self.item = item
        question = item.fields.get("question", item.prompt)  # a task's own rendering (its chat prompt) stays out
        question = f"{question}\n\n{self.instruction}" if self.instruction else question
        return ([{"role": "system", "content": self.system}] if self.system else []) + \
            [{"role": "user", "content": question}]

    def step(self, message: Message) -> StepResult:
        calls = parse_tool_calls(message["content"], self.tool_list)
        if calls:
            results = [run_tool_call(call, self.tool_list) for call in calls]
            right = sum(ok and self._is_answer(text) for text, ok in results)
            return StepResult([{"role": "tool", "content": text} for text, _ in results], 0.0, False,
                              {"tool_calls": len(calls), "tool_errors": sum(not ok for _, ok in results),
                               "tool_calls_correct": right})
        answer = message["content"]
        score = self.score(self.item.prompt, answer, self.item.as_dict())
        reward = float(getattr(score, "score", score))
        return StepResult([], reward, True, {"correct": bool(self.task.is_correct(answer, self.item))})

    def demonstration(self, item: Any, rng: random.Random) -> list[str]:
        """The assistant messages of a demonstrated episode (module docstring): the calculator call, then the
        answer; the answer alone when the item has no usable expression. `rng` is unused: one way to play."""
        answer = self.answer_format.replace("{answer}", str(item.answer))
        expression = item.fields.get("expression")
        if not expression or "calculator" not in {t.name for t in self.tool_list}:
            return [answer]
        text, ok = run_tool_call(ToolCall("calculator", {"expression": expression}), self.tool_list)
        if not ok or not self._is_answer(text, item):
            return [answer]
        call = {"name": "calculator", "arguments": {"expression": expression}}
        return [f"<tool_call>{json.dumps(call)}</tool_call>", answer]

    def _is_answer(self, output: str, item: Any = None) -> bool:
        """A tool's output is the item's reference answer, as text (what a correct call returns)."""
        return output.strip() == str((item or self.item).answer).strip()
