"""Grading on this side of the sandbox: which parts of a test go in, how values come back."""

import ast
import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.sandbox._launcher import _serialise
from rlvr.rewards import grade
from rlvr.rewards.grade import parse_value, split_test, verdict, verdicts


def test_split_keeps_the_expected_side_here():
    s = split_test("assert f(1) == 2")
    assert s.exprs == ("f(1)",) and ast.unparse(s.check) == "_v0 == 2"
    s = split_test("assert sorted(f([3, 1])) == [1, 3], 'message'")
    assert s.exprs == ("f([3, 1])",) and ast.unparse(s.check) == "sorted(_v0) == [1, 3]"
    s = split_test("assert math.isclose(area(2), 12.56, rel_tol=0.01)")
    assert s.exprs == ("area(2)",) and ast.unparse(s.check) == "math.isclose(_v0, 12.56, rel_tol=0.01)"
    s = split_test("assert not is_prime(8) and g(x=1)[0] > 3")
    assert s.exprs == ("is_prime(8)", "g(x=1)[0]")
    s = split_test("assert all(f(x) for x in range(3))")  # a scope of its own: evaluated whole, inside
    assert s.exprs == ("all((f(x) for x in range(3)))",)
    assert split_test("assert True").exprs == ()


@pytest.mark.parametrize("bad", ["f(1) == 2", "assert f(1) ==", "x = 1\nassert x"])
def test_a_test_must_be_one_assert(bad):
    with pytest.raises(ValueError, match="code test"):
        split_test(bad)


def test_verdict_compares_plain_values():
    s = split_test("assert f(1) == 2")
    assert verdict(s, ["2"]) and not verdict(s, ["3"])
    assert not verdict(s, [None]) and not verdict(s, None) and not verdict(s, [])
    assert not verdict(s, ["__import__('os')"])  # never evaluated: not a literal
    assert verdict(split_test("assert set(f()) == {1, 2}"), ["[2, 1, 1]"])
    assert verdict(split_test("assert math.isnan(f())"), ["float('nan')"])
    assert verdict(split_test("assert f() == frozenset({1})"), ["frozenset([1])"])
    assert not verdict(split_test("assert f() > 1"), ["'a'"])  # TypeError in the check: a failure


@pytest.mark.parametrize("value", [1, -2.5, "a'b\n", b"\x00", None, True, (1,), (), [1, [2]], {1: (2, "x")},
                                   {3, 4}, frozenset(), set(), math.inf])
def test_serialise_then_parse_round_trips(value):
    assert parse_value(_serialise(value)) == value


def test_objects_of_the_programs_making_do_not_serialise():
    class Liar:
        def __eq__(self, other):
            return True

    class Int(int):
        pass

    class Str(str):
        def __repr__(self):
            return "2"

    for value in (Liar(), Int(2), Str("x"), [1, Liar()], {"k": Int(1)}, print, iter([1])):
        assert _serialise(value) is None


_plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.integers() | st.text(), inner, max_size=4),
    max_leaves=20)


@given(_plain)
def test_round_trip_of_any_plain_value(value):
    assert parse_value(_serialise(value)) == value


CHECKS = [("assert f(1) == 2", ["2"]), ("assert f(1) == 2", ["3"]), ("assert f(1) == 2", ["__import__('os')"]),
          ("assert set(f()) == {1, 2}", ["[2, 1, 1]"]), ("assert math.isnan(f())", ["float('nan')"]),
          ("assert f() == frozenset({1})", ["frozenset([1])"]), ("assert f() > 1", ["'a'"]), ("assert True", []),
          ("assert f(1) == 2", [None])]


def test_verdicts_in_their_own_process_agree_with_verdict():
    tests, values = zip(*CHECKS)
    assert verdicts(tests, values, 5, 256, 10) == [verdict(split_test(t), v) for t, v in CHECKS]


def test_no_values_no_check_process(monkeypatch):
    monkeypatch.setattr(grade.subprocess, "Popen", None)  # a call would raise
    assert verdicts(["assert f(1) == 2", "assert g()"], [None, None], 5, 256, 10) == [False, False]


def test_a_value_that_blows_up_its_check_fails_within_the_limits():
    huge = str(10**15)  # [0] * _v0: MemoryError under RLIMIT_AS; sum(range(_v0)): a C loop, ended by RLIMIT_CPU
    start = time.monotonic()
    got = verdicts(["assert f(1) == 2", "assert [0] * f(1) == []", "assert sum(range(f(1))) == 0", "assert f(2) == 3"],
                   [["2"], [huge], [huge], ["3"]], 1, 256, 10)
    assert got == [True, False, False, False]  # after a limit hit the remaining checks fail unchecked
    # the limits ended it (the sum alone takes days): the CPU limit on a quiet machine (about 1 s), the 10 s
    # wall-clock limit on one too busy to give the check its CPU second; the margin is start-up on such a machine
    assert time.monotonic() - start < 10 + 50


def test_huge_and_deep_literals_are_read_in_the_check_process():
    deep = "[" * 100_000 + "]" * 100_000
    assert verdicts(["assert f() == []", "assert len(f()) == 3"], [[deep], ["[1, 2, 3]"]], 1, 256, 10) == [False, True]
    assert verdicts(["assert len(f()) == 100000"], [["[" + "1, " * 100_000 + "]"]], 5, 256, 10) == [True]


def test_a_broken_check_process_is_loud(monkeypatch):
    monkeypatch.setattr(grade, "__file__", "/nonexistent/grade.py")
    with pytest.raises(RuntimeError, match="grading code tests"):
        verdicts(["assert f(1) == 2"], [["2"]], 1, 256, 10)
