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
"""

from __future__ import annotations

import json
from typing import Any

from rlvr.environments.base import register_environment
from rlvr.environments.tools import get_tools, parse_tool_calls, run_tool_call
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
                 instruction: str = "") -> None:
        self.task, self.tool_list = task, get_tools(list(tools))
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
            return StepResult([{"role": "tool", "content": text} for text, _ in results], 0.0, False,
                              {"tool_calls": len(calls), "tool_errors": sum(not ok for _, ok in results)})
        answer = message["content"]
        score = self.score(self.item.prompt, answer, self.item.as_dict())
        reward = float(getattr(score, "score", score))
        return StepResult([], reward, True, {"correct": bool(self.task.is_correct(answer, self.item))})
