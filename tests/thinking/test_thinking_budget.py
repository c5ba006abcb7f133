import pytest
from hypothesis import given, settings, strategies as st

from rlvr.rollout.base import SamplingParams
from rlvr.thinking.budget import EARLY_STOP_PHRASE, EARLY_STOP_TEXT, ThinkingBudgetEngine

from thinking_fakes import CharScriptEngine, encode

Q = "Q: 2+3? "
THINK = "<think>\nadd two and three, that is five\n</think>"
FULL = THINK + "\n\n5"
SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=20)


def test_thinking_that_closes_within_budget_is_untouched():
    engine = CharScriptEngine({Q: FULL})
    (c,) = ThinkingBudgetEngine(engine, budget=200).generate([Q], 1, SAMPLING)
    assert c.text == FULL and c.token_ids == encode(FULL) + [0]
    assert c.logprobs == [-0.5] * len(c.token_ids) and all(c.extra["sampled_mask"])
    assert c.extra["thinking_tokens"] == len(THINK) and not c.extra["budget_exhausted"]
    assert (c.extra["thinking"], c.extra["answer"]) == ("add two and three, that is five", "5")
    assert c.finish_reason == "stop" and c.prompt_ids == encode(Q)
    (_, _, think), (_, _, answer) = [call for call in engine.calls]
    assert think.stop == ("</think>",) and think.max_new_tokens == 200 and answer.max_new_tokens == 20


def test_budget_cut_inserts_the_early_stop_phrase():
    engine = CharScriptEngine({Q: FULL}, after_cut={Q: "6"})
    (c,) = ThinkingBudgetEngine(engine, budget=12).generate([Q], 1, SAMPLING)
    assert EARLY_STOP_PHRASE in EARLY_STOP_TEXT and EARLY_STOP_TEXT.rstrip().endswith("</think>")
    assert c.text == FULL[:12] + EARLY_STOP_TEXT + "6"
    assert c.token_ids == encode(c.text) + [0]
    inserted = [i for i, m in enumerate(c.extra["sampled_mask"]) if not m]
    assert inserted == list(range(12, 12 + len(EARLY_STOP_TEXT)))
    assert all(c.logprobs[i] == 0.0 for i in inserted) and c.logprobs[:12] == [-0.5] * 12
    assert c.extra["budget_exhausted"] and c.extra["thinking_tokens"] == 12 and c.extra["answer"] == "6"


def test_eos_inside_thinking_returns_as_is_and_groups_stay_contiguous():
    engine = CharScriptEngine({"a": "<think>never closes", "b": FULL})
    out = ThinkingBudgetEngine(engine, budget=100).generate(["a", "b"], 2, SAMPLING)
    assert [c.prompt for c in out] == ["a", "a", "b", "b"]
    assert out[0].text == "<think>never closes" and out[0].extra["answer"] == ""
    assert out[2].text == FULL and len(engine.calls[1][0]) == 2  # only b's two samples continue


def test_no_think_response_and_answer_budget():
    engine = CharScriptEngine({Q: "<think>\n\n</think>\n\n12345"})
    (c,) = ThinkingBudgetEngine(engine, budget=64, answer_tokens=3).generate([Q], 1, SAMPLING)
    assert c.text == "<think>\n\n</think>\n\n1" and c.finish_reason == "length"  # "\n\n1": 3 answer tokens
    assert c.extra["thinking"] == ""


def test_engine_without_stop_reason_is_taken_to_stop_on_think_end_and_weights_delegate():
    engine = CharScriptEngine({Q: FULL}, report_stop=False)
    wrapped = ThinkingBudgetEngine(engine, budget=200)
    (c,) = wrapped.generate([Q], 1, SAMPLING)
    assert c.text == FULL
    wrapped.load_weights([("w", 1)])
    assert engine.loaded == [("w", 1)]


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 60), st.integers(1, 10), st.text("ab <>/\n", max_size=40))
def test_invariants(budget, answer_tokens, reasoning):
    engine = CharScriptEngine({Q: f"<think>{reasoning}</think>\n\nok"})
    (c,) = ThinkingBudgetEngine(engine, budget, answer_tokens=answer_tokens).generate([Q], 1, SAMPLING)
    assert len(c.token_ids) == len(c.logprobs) == len(c.extra["sampled_mask"])
    assert [t for t in c.token_ids if t] == encode(c.text)  # the text is exactly the tokens (EOS aside)
    assert c.extra["thinking_tokens"] <= budget
    assert c.extra["budget_exhausted"] == (EARLY_STOP_TEXT in c.text)


def test_bad_arguments_and_misaligned_tokenisation():
    engine = CharScriptEngine({Q: FULL})
    with pytest.raises(ValueError, match="positive int"):
        ThinkingBudgetEngine(engine, 0)
    with pytest.raises(ValueError, match="close the thinking"):
        ThinkingBudgetEngine(engine, 8, early_stop_text="stop now")
    with pytest.raises(ValueError, match="answer_tokens"):
        ThinkingBudgetEngine(engine, 8, answer_tokens=0)

    class Retokenising(CharScriptEngine):
        def _one(self, prompt, sampling):
            c = super()._one(prompt, sampling)
            c.prompt_ids = [7] + c.prompt_ids if "</think>" in prompt else c.prompt_ids
            return c

    with pytest.raises(ValueError, match="tokenised the prompt differently"):
        ThinkingBudgetEngine(Retokenising({Q: FULL}), 200).generate([Q], 1, SAMPLING)
