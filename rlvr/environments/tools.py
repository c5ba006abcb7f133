"""Tools: Python callables with JSON-schema arguments, called from the model's text.

A tool call is read in the format of Qwen2.5's and SmolLM2's chat templates (Hermes function calling):

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "12 * 7"}}
    </tool_call>

and, for a model that does not write the tags, a plain fallback: a bare JSON object with `name` and
`arguments`, or `calculator(12 * 7)`, a tool's name called with its one required argument as text. What the
tool returns becomes a `tool` message. Nothing a call does is raised: an unknown tool, arguments that do not
fit the schema, malformed JSON or an exception in the tool come back to the model as an observation
`error: ...` and count in `tool_errors` (verl's tool agent loop and TRL's GRPOTrainer do the same), so the
model can learn from them and the run goes on. Tools are registered by name (`register_tool`); the
`tools` environment (`rlvr.environments.tool_env`) offers those its options name.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from rlvr.sandbox import SandboxLimits, run_python

MAX_OUTPUT_CHARS = 2000  # a tool's output beyond this is cut (the runner also cuts observations by tokens)
_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class Tool:
    name: str
    fn: Callable[..., Any]
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments: {"type": "object", "properties": ..., "required": ...}

    def spec(self) -> dict[str, Any]:
        """The tool as Hugging Face chat templates take it (`apply_chat_template(tools=...)`, OpenAI's format)."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


TOOLS: dict[str, Tool] = {}


def register_tool(name: str, description: str, parameters: dict[str, Any]) -> Callable[[Callable], Callable]:
    """Register `fn(**arguments) -> result` as the tool `name`; `parameters` is its arguments' JSON schema."""
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in TOOLS:
            raise ValueError(f"tool {name!r} registered twice")
        TOOLS[name] = Tool(name, fn, description, parameters)
        return fn

    return deco


def get_tools(names: list[str]) -> list[Tool]:
    unknown = [n for n in names if n not in TOOLS]
    if unknown:
        raise ValueError(f"unknown tool {unknown[0]!r}; choose from {sorted(TOOLS)}")
    return [TOOLS[n] for n in names]


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # why it could not be read; the call is then not run


def parse_tool_calls(text: str, tools: list[Tool]) -> list[ToolCall]:
    """The tool calls in a message: every `<tool_call>` block, or else one plain call (see the module
    docstring). A block that is not a JSON object with a string `name` and an object `arguments` is a call
    with an `error`."""
    blocks = _TAGGED.findall(text)
    if blocks:
        return [_from_json(block) for block in blocks]
    start = text.find("{")
    if start >= 0 and '"name"' in text:
        call = _from_json(text[start:text.rfind("}") + 1])
        if call.error is None:
            return [call]
    for tool in tools:
        match = re.search(rf"\b{re.escape(tool.name)}\((.*)\)", text, re.DOTALL)
        required = tool.parameters.get("required", [])
        if match and len(required) == 1:
            return [ToolCall(tool.name, {required[0]: match.group(1).strip()})]
    return []


def _from_json(raw: str) -> ToolCall:
    try:
        value = json.loads(raw)
    except ValueError as err:
        return ToolCall("?", error=f"the tool call is not valid JSON ({err})")
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return ToolCall("?", error='a tool call is a JSON object {"name": ..., "arguments": {...}}')
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    if not isinstance(arguments, dict):
        return ToolCall(value["name"], error="the tool call's arguments must be a JSON object")
    return ToolCall(value["name"], arguments)


_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict}


def argument_problem(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """Why `arguments` do not fit the JSON schema (required keys, unknown keys, the types of the properties),
    or None."""
    props = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if k not in arguments]
    if missing:
        return f"missing argument {missing[0]!r}"
    for key, value in arguments.items():
        if key not in props:
            return f"unknown argument {key!r}; arguments: {', '.join(props) or '(none)'}"
        kind = props[key].get("type")
        wanted = _JSON_TYPES.get(kind)
        if wanted is not None and (not isinstance(value, wanted) or (kind != "boolean" and isinstance(value, bool))):
            return f"argument {key!r} must be {kind}, got {type(value).__name__}"
    return None


def run_tool_call(call: ToolCall, tools: list[Tool]) -> tuple[str, bool]:
    """(the observation text, whether the call worked); never raises."""
    if call.error is not None:
        return f"error: {call.error}", False
    found = {t.name: t for t in tools}.get(call.name)
    if found is None:
        return f"error: unknown tool {call.name!r}; tools: {', '.join(sorted(t.name for t in tools))}", False
    problem = argument_problem(found.parameters, call.arguments)
    if problem is not None:
        return f"error: {call.name}: {problem}", False
    try:
        result = found.fn(**call.arguments)
    except Exception as err:  # noqa: BLE001 - a tool's failure is the model's observation, not the run's
        return f"error: {call.name}: {type(err).__name__}: {err}"[:MAX_OUTPUT_CHARS], False
    text = result if isinstance(result, str) else json.dumps(result, default=str)
    return text[:MAX_OUTPUT_CHARS], True


# --- built-in tools -------------------------------------------------------------------------------------------

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_MAX_MAGNITUDE = 1e15  # bigger intermediate results are refused: 9**9**9 must not hang the step


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > _MAX_MAGNITUDE):
            raise ValueError("exponent too large")
        value = _BINARY[type(node.op)](left, right)
        if abs(value) > _MAX_MAGNITUDE:
            raise ValueError("result too large")
        return value
    raise ValueError(f"only numbers, + - * / // % ** and parentheses are allowed, not {ast.unparse(node)!r}")


@register_tool("calculator", "Evaluate an arithmetic expression: numbers, + - * / // % ** and parentheses.",
               {"type": "object", "properties": {"expression": {"type": "string",
                                                                "description": "e.g. (12 + 7) * 3"}},
                "required": ["expression"]})
def calculator(expression: str) -> str:
    """The expression's value; integers stay exact, a whole float is written as an integer."""
    try:
        tree = ast.parse(expression.replace("×", "*").replace("÷", "/").replace("^", "**"), mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot read {expression!r} as arithmetic") from None
    value = _evaluate(tree.body)
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)
    return str(value)


@register_tool("python", "Run a Python program in a sandbox and return what it prints (stdout, then stderr).",
               {"type": "object", "properties": {"code": {"type": "string", "description": "a Python program"}},
                "required": ["code"]})
def python(code: str) -> str:
    """The program's output, run as the code reward runs a program (`rlvr.sandbox.run_python`: bubblewrap, a
    fresh interpreter, resource limits, the audit hook), so a hostile program is contained the same way."""
    result = run_python(code, limits=SandboxLimits(cpu_seconds=2, wall_seconds=5, memory_mb=256))
    out = result.stdout + (f"\n{result.stderr}" if result.stderr else "")
    if result.timed_out:
        out += "\nerror: the program ran past its time limit"
    return out.strip() or "(no output)"
