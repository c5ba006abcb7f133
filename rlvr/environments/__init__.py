"""Environments for multi-turn episodes (the protocol and the runner are `rlvr.rollout.environment` and
`rlvr.rollout.episode`): the registry, tools, and the built-in environments, each registered on import."""

from rlvr.environments.base import ENVIRONMENTS, environment_factory, register_environment, resolve_environment
from rlvr.environments.tools import TOOLS, Tool, ToolCall, get_tools, parse_tool_calls, register_tool, run_tool_call
from rlvr.environments import code_env, guess, tool_env  # noqa: F401  (register "code", "guess", "tools")

__all__ = ["ENVIRONMENTS", "TOOLS", "Tool", "ToolCall", "environment_factory", "get_tools", "parse_tool_calls",
           "register_environment", "register_tool", "resolve_environment", "run_tool_call"]
