"""The seam between the rollout and an environment: multi-turn episodes over chat messages.

An environment is reset from a task item (an `Example`) and answers with the episode's first messages; it
is then stepped with each assistant message and answers with observation messages (role `user`, or `tool`
for a tool's output), a reward, whether the episode is over, and an info mapping. This is Gym's
reset/step (Brockman et al. 2016) over messages, the shape verifiers' `MultiTurnEnv` (`env_response`,
`is_completed`) and TRL's `environment_factory` give it for chat models. One environment object plays one
episode; the runner (`rlvr.rollout.episode`) builds one per episode, renders the messages with the model's
chat template, and marks which tokens the model wrote (only those train).

What the runner reads from `StepResult.info` (all optional): `correct` (the episode was solved; its last
value counts, as the task verifier's `is_correct` does for one turn), `tool_calls` and `tool_errors`
(counts in this step, summed into the batch's `episode/tool_calls` and `episode/tool_errors`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, Any]  # {"role": "system" | "user" | "assistant" | "tool", "content": str}


@dataclass
class StepResult:
    observations: list[Message]  # what the environment says next (role user or tool); [] for nothing
    reward: float = 0.0  # this step's reward; an episode's reward is the sum over its steps
    done: bool = False  # the episode is over (solved, failed, or out of attempts)
    info: dict[str, Any] = field(default_factory=dict)  # see the module docstring for the keys the runner reads


@runtime_checkable
class Environment(Protocol):
    def reset(self, item: Any) -> list[Message]:
        """Start an episode on task item `item` (an `rlvr.tasks.Example`); the first messages (system, user)."""
        ...

    def step(self, message: Message) -> StepResult:
        """The model's turn, `{"role": "assistant", "content": text}`: what happens next."""
        ...
