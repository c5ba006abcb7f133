"""Tools: calls read in the Hermes / Qwen2.5 / SmolLM2 `<tool_call>` format and a plain fallback, arguments checked
against the JSON schema, and every failure (unknown tool, bad JSON, bad arguments, an exception in the tool)
returned as an `error: ...` observation, never raised. The calculator evaluates arithmetic only; the python tool
runs in the sandbox."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.environments.tools import (TOOLS, ToolCall, argument_problem, calculator, get_tools, parse_tool_calls,
                                     register_tool, run_tool_call)

CALC = get_tools(["calculator"])


def test_tagged_calls():
    text = ('Let me compute. <tool_call>\n{"name": "calculator", "arguments": {"expression": "12 * 7"}}\n</tool_call>'
            '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"1+1\\"}"}</tool_call>')
    calls = parse_tool_calls(text, CALC)
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("calculator", {"expression": "12 * 7"}, None), ("calculator", {"expression": "1+1"}, None)]
    assert [run_tool_call(c, CALC) for c in calls] == [("84", True), ("2", True)]


def test_plain_fallbacks():
    assert parse_tool_calls('{"name": "calculator", "arguments": {"expression": "2**5"}}', CALC)[0].arguments == \
        {"expression": "2**5"}
    [call] = parse_tool_calls("I will use calculator(3 * (4 + 1)) now", CALC)
    assert run_tool_call(call, CALC) == ("15", True)
    assert parse_tool_calls("The answer is 15.", CALC) == []  # no call: the message is an answer


def test_every_failure_is_an_observation():
    cases = {
        "<tool_call>{not json}</tool_call>": "not valid JSON",
        '<tool_call>["calculator"]</tool_call>': "a tool call is a JSON object",
        '<tool_call>{"name": "search", "arguments": {}}</tool_call>': "unknown tool 'search'",
        '<tool_call>{"name": "calculator", "arguments": {}}</tool_call>': "missing argument 'expression'",
        '<tool_call>{"name": "calculator", "arguments": {"expression": 7}}</tool_call>': "must be string",
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1", "x": 2}}</tool_call>': "unknown argument",
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1/0"}}</tool_call>': "ZeroDivisionError",
        '<tool_call>{"name": "calculator", "arguments": {"expression": "__import__(\'os\')"}}</tool_call>':
            "only numbers",
        '<tool_call>{"name": "calculator", "arguments": {"expression": "9**9**9"}}</tool_call>': "too large",
    }
    for text, why in cases.items():
        [call] = parse_tool_calls(text, CALC)
        out, ok = run_tool_call(call, CALC)
        assert not ok and out.startswith("error: ") and why in out, (text, out)


def test_calculator_by_hand():
    assert calculator("(12 + 7) * 3") == "57" and calculator("7 / 2") == "3.5" and calculator("10 / 5") == "2"
    assert calculator("2 ^ 10") == "1024" and calculator("-3 % 5") == "2" and calculator("6 × 7") == "42"


@settings(max_examples=60, deadline=None)
@given(st.integers(-10**6, 10**6), st.integers(-10**6, 10**6), st.sampled_from(["+", "-", "*"]))
def test_calculator_agrees_with_python_on_integers(a, b, op):
    assert calculator(f"{a} {op} ({b})") == str(eval(f"{a} {op} ({b})"))


def test_argument_types_follow_the_schema():
    schema = {"properties": {"n": {"type": "integer"}, "flag": {"type": "boolean"}, "x": {"type": "number"}},
              "required": ["n"]}
    assert argument_problem(schema, {"n": 3, "flag": True, "x": 1.5}) is None
    assert "must be integer" in argument_problem(schema, {"n": True})  # a bool is not an integer
    assert "must be integer" in argument_problem(schema, {"n": 1.5})
    assert argument_problem(schema, {"n": 1, "x": 2}) is None  # an integer is a number


def test_a_registered_tool_and_its_spec():
    @register_tool("test_echo", "Say it back.", {"type": "object", "properties": {"text": {"type": "string"}},
                                                  "required": ["text"]})
    def echo(text):
        return {"said": text}

    try:
        tools = get_tools(["test_echo"])
        assert tools[0].spec()["function"]["name"] == "test_echo"
        assert run_tool_call(ToolCall("test_echo", {"text": "hi"}), tools) == ('{"said": "hi"}', True)
        with pytest.raises(ValueError, match="registered twice"):
            register_tool("test_echo", "", {})(echo)
    finally:
        TOOLS.pop("test_echo")
    with pytest.raises(ValueError, match="unknown tool 'test_echo'"):
        get_tools(["test_echo"])
