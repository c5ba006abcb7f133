"""Format, R1-Zero, length (Kimi k1.5, DAPO) and language-consistency rewards."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.rewards import (BatchContext, CombinedReward, KimiLengthReward, LanguageConsistencyReward, MathReward,
                          OverlongPenalty, RewardConfigError, StepGated, dapo_overlong_penalty, format_ok,
                          kimi_length_reward, r1_format_reward, r1_format_reward_strict, reward_from_name,
                          SafeReward, script_share)
from rlvr.rewards.format import with_prompt_prefix
from rlvr.rewards.language import words

R1_PROMPT = "User: what is 1/2 as a decimal? Assistant: <think>"


def test_format_strict_and_lenient():
    strict = "<think>\nhalf\n</think>\n<answer>\n0.5\n</answer>"
    loose = "<think>half</think>  <answer>0.5</answer> "
    assert format_ok(strict, strict=True) and format_ok(strict)
    assert format_ok(loose) and not format_ok(loose, strict=True)
    for bad in ["<answer>0.5</answer><think>x</think>", "<think>a</think><think>b</think><answer>1</answer>",
                "no tags", "<think>x</think> <answer>1</answer> trailing words", "<think>x</think>"]:
        assert not format_ok(bad)


def test_prompt_that_opens_think_counts():
    assert r1_format_reward(R1_PROMPT, "half</think> <answer>0.5</answer>", {}) == 1.0
    assert r1_format_reward("plain prompt", "half</think> <answer>0.5</answer>", {}) == 0.0
    assert r1_format_reward_strict(R1_PROMPT, "\nhalf\n</think>\n<answer>\n0.5\n</answer>", {}) == 1.0


def test_r1_zero_is_format_gate_times_correctness():
    reward = reward_from_name("r1_zero")
    cases = [("half</think> <answer>\\frac{1}{2}</answer>", 1.0, 1.0, 1.0),
             ("half</think> <answer>0.7</answer>", 0.0, 1.0, 0.0),
             ("the answer is 0.5", 0.0, 0.0, 1.0),  # right, but not in the format: 0
             ("half</think> <answer>ok \\boxed{0.5}</answer>", 1.0, 1.0, 1.0)]
    batch = reward.score_batch([R1_PROMPT] * 4, [c for c, *_ in cases], [{"answer": "0.5"}] * 4)
    assert batch.scores == [s for _, s, _, _ in cases]
    assert batch.components["format"] == [f for *_, f, _ in cases]
    assert batch.components["correct"] == [c for *_, c in cases]


def test_math_reward_boxed_and_missing_truth():
    reward = MathReward()
    assert reward("q", "so \\boxed{\\frac{3}{4}}", {"answer": "0.75"}).score == 1.0
    assert reward("q", "so \\boxed{3}", {"answer": "0.75"}).score == 0.0
    with pytest.raises(KeyError, match="ground truth"):
        reward("q", "\\boxed{1}", {"solution": "1"})
    with pytest.raises(ValueError):
        MathReward(format_gate="loose")


# --- Kimi k1.5 length reward -----------------------------------------------------------------------


def test_kimi_by_hand():
    # lambda = 0.5 - (len - 10) / 30 = [0.5, 1/6, -1/6, -0.5]
    got = kimi_length_reward([10, 20, 30, 40], [True, True, False, False])
    assert got == pytest.approx([0.5, 1 / 6, -1 / 6, -0.5])
    assert kimi_length_reward([10, 40], [False, True]) == [0.0, -0.5]
    assert kimi_length_reward([7, 7, 7], [True, False, True]) == [0.0, 0.0, 0.0]
    assert kimi_length_reward([], []) == []


lengths_and_correct = st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.lists(st.integers(1, 4096), min_size=n, max_size=n), st.lists(st.booleans(), min_size=n, max_size=n)))


@given(lengths_and_correct, st.integers(1, 5), st.integers(0, 100))
def test_kimi_properties(lc, scale, shift):
    lengths, correct = lc
    got = kimi_length_reward(lengths, correct)
    assert all(-0.5 <= g <= 0.5 for g in got)
    assert all(g <= 0 for g, ok in zip(got, correct) if not ok)  # wrong answers never gain
    assert got == pytest.approx(kimi_length_reward([scale * n + shift for n in lengths], correct))
    if len(set(lengths)) > 1:
        shortest = min(lengths)
        assert all(g == 0.5 for g, n, ok in zip(got, lengths, correct) if ok and n == shortest)


def test_kimi_batched_by_group_with_step_gate():
    reward = StepGated(KimiLengthReward(), start_step=10)
    ctx = BatchContext(group_size=2, lengths=[10, 20, 5, 5], correct=[True, False, True, True], step=10)
    args = (["p"] * 4, ["a", "b", "c", "d"], [{}] * 4)
    assert reward.score_batch(*args, ctx).scores == [0.5, -0.5, 0.0, 0.0]
    early = reward.score_batch(*args, BatchContext(group_size=2, lengths=[10, 20, 5, 5], step=9))
    assert all(math.isnan(s) for s in early.scores)
    combined = CombinedReward([(reward, 1.0, "kimi")])
    assert combined.score_batch(*args, BatchContext(group_size=2, lengths=[1, 2, 3, 4], step=0)).scores == [0.0] * 4


def test_kimi_correctness_from_math_when_not_given():
    reward = KimiLengthReward()
    ctx = BatchContext(group_size=2, lengths=[10, 30])
    batch = reward.score_batch(["q", "q"], ["\\boxed{2}", "\\boxed{3}"], [{"answer": "2"}] * 2, ctx)
    assert batch.scores == [0.5, -0.5]


def test_length_rewards_need_lengths():
    with pytest.raises(RewardConfigError, match="lengths"):
        KimiLengthReward().score_batch(["p"], ["c"], [{}], BatchContext())
    with pytest.raises(RewardConfigError, match="divide"):
        KimiLengthReward().score_batch(["p"] * 3, ["c"] * 3, [{}] * 3,
                                       BatchContext(group_size=2, lengths=[1, 2, 3], correct=[True] * 3))
    with pytest.raises(RewardConfigError, match="max_len"):
        OverlongPenalty(cache_len=4).score_batch(["p"], ["c"], [{}], BatchContext(lengths=[3]))


# --- DAPO soft overlong penalty ----------------------------------------------------------------------


def test_dapo_closed_form():
    # L_max = 100, L_cache = 20: free up to 80, then (80 - L) / 20, -1 beyond 100 (DAPO eq. 13)
    assert [dapo_overlong_penalty(n, 100, 20) for n in (0, 80, 81, 90, 100, 101, 500)] == \
        [0.0, 0.0, -0.05, -0.5, -1.0, -1.0, -1.0]
    batch = OverlongPenalty(cache_len=20).score_batch(["p"] * 2, ["a", "b"], [{}] * 2,
                                                       BatchContext(lengths=[85, 120], max_new_tokens=100))
    assert batch.scores == [-0.25, -1.0]
    with pytest.raises(ValueError):
        dapo_overlong_penalty(5, 10, 11)


def test_overlong_cache_longer_than_the_samplers_max_len_is_a_setting_error_not_per_sample_errors():
    """max_len from the sampler (BatchContext.max_new_tokens) below cache_len: every sample failed one by one
    (errors counted, reward 0, the run went on); now one RewardConfigError, also through SafeReward."""
    ctx = BatchContext(lengths=[3, 9], max_new_tokens=8)
    with pytest.raises(RewardConfigError, match="cache_len 10 exceeds max_len 8"):
        OverlongPenalty(cache_len=10).score_batch(["p"] * 2, ["a", "b"], [{}] * 2, ctx)
    with pytest.raises(RewardConfigError, match="cache_len 10 exceeds max_len 8"):
        SafeReward(OverlongPenalty(cache_len=10)).score_batch(["p"] * 2, ["a", "b"], [{}] * 2, ctx)
    assert OverlongPenalty(cache_len=8).score_batch(["p"] * 2, ["a", "b"], [{}] * 2, ctx).scores == [-0.375, -1.0]


@given(st.integers(1, 2000), st.integers(1, 2000), st.integers(0, 3000))
def test_dapo_properties(max_len, cache, length):
    cache = min(cache, max_len)
    p = dapo_overlong_penalty(length, max_len, cache)
    assert -1.0 <= p <= 0.0
    assert dapo_overlong_penalty(length + 1, max_len, cache) <= p  # never rewards growing
    assert dapo_overlong_penalty(max_len, max_len, cache) == -1.0  # continuous at L_max


# --- language consistency ---------------------------------------------------------------------------


def test_language_share_by_hand():
    en, zh = LanguageConsistencyReward("en"), LanguageConsistencyReward("zh")
    assert en("q", "<think>hello world</think><answer>1</answer>", {}) == 1.0
    assert zh("q", "<think>你好世界</think>", {}) == 1.0
    # R1 counts words, not letters: 1 English word + 2 CJK characters (one word each) -> 1/3 (letters gave 5/7)
    assert en("q", "<think>hello 你好</think>", {}) == pytest.approx(1 / 3)
    assert en("q", "<think>the answer is 你</think>", {}) == pytest.approx(3 / 4)
    assert en("q", "<think>2 + 2 = 4</think>", {}) == 0.0  # no words: no evidence of the language
    assert LanguageConsistencyReward("ja")("q", "<think>日本語のテキスト</think>", {}) == 1.0
    assert LanguageConsistencyReward("ru")("q <think>", "это test", {}) == 0.5  # opened by the prompt, unclosed
    assert words("naïve x2, 日本 done") == ["naïve", "x", "日", "本", "done"]
    with pytest.raises(ValueError, match="choose from"):
        LanguageConsistencyReward("klingon")


def test_language_reward_scores_only_a_reasoning_block():
    """Without a <think> block the whole completion was scored: gibberish letters ("9eJ") got 1.0 and a correct
    digits-only answer 0.0, and RL on the R1 recipe learned the letters. No reasoning block: nothing to score, 0."""
    en = LanguageConsistencyReward("en")
    assert en("sort 9 3 7 8=", "9eJ", {}) == en("sort 9 3 7 8=", "3 7 8 9", {}) == 0.0
    assert en("q", "<think>sorted it</think> 3 7 8 9", {}) == 1.0
    assert en("q", "the answer is 4", {}) == 0.0


@given(st.lists(st.text(alphabet="abcdefXYZ", min_size=1, max_size=8), min_size=1, max_size=6),
       st.text(alphabet="中文字汉", max_size=30), st.text(alphabet="0123456789 +-=.,()", max_size=20))
def test_language_properties(latin_words, han, neutral):
    mixed = " ".join(latin_words) + " " + han
    share = script_share(mixed, ("LATIN",))
    assert share == pytest.approx(len(latin_words) / (len(latin_words) + len(han)))  # a Han character = a word
    assert script_share(mixed + " " + neutral, ("LATIN",)) == share  # digits and symbols make no word
    assert script_share(mixed + " " + " ".join(latin_words), ("LATIN",)) >= share
    assert script_share(" ".join(latin_words), ("LATIN",)) == 1.0


# --- format reward: properties over generated layouts -----------------------------------------------

_TAG_FREE = st.text(alphabet="ab 1<>/=\n", max_size=12)  # these characters cannot spell a tag
_BODY = st.one_of(_TAG_FREE, st.tuples(_TAG_FREE, st.sampled_from(["<think>", "</think>", "<answer>", "</answer>"]),
                                       _TAG_FREE).map("".join))
_GAP = st.text(alphabet=" \n\tx", max_size=4)  # whitespace, sometimes a stray non-space character


@settings(max_examples=200, deadline=None)
@given(lead=_GAP, think=_BODY, sep=_GAP, answer=_BODY, trail=_GAP)
def test_lenient_format_is_exactly_one_think_then_one_answer_block(lead, think, sep, answer, trail):
    """R1's format (DeepSeek-AI 2025, sec. 2.2.2), lenient: accepted iff the bodies hold no tag and only
    whitespace surrounds and separates the two blocks."""
    text = f"{lead}<think>{think}</think>{sep}<answer>{answer}</answer>{trail}"
    tags = ("<think>", "</think>", "<answer>", "</answer>")
    expected = not any(tag in body for body in (think, answer) for tag in tags) and \
        all(not gap.strip() for gap in (lead, sep, trail))
    assert format_ok(text) == expected
    assert format_ok(f"<answer>{answer}</answer><think>{think}</think>") is False  # order matters
    assert r1_format_reward(R1_PROMPT, text[len(lead):].removeprefix("<think>"), {}) == \
        float(format_ok(text[len(lead):]))  # a prompt that opens <think> supplies the tag


@settings(max_examples=200, deadline=None)
@given(think=_BODY, answer=_BODY, newline_at_end=st.booleans())
def test_strict_format_is_open_r1s_layout_and_implies_lenient(think, answer, newline_at_end):
    """Strict (open-r1): `<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>`, an optional final newline.
    Strict implies lenient; any extra space before <think> breaks strict but not lenient."""
    text = f"<think>\n{think}\n</think>\n<answer>\n{answer}\n</answer>" + ("\n" if newline_at_end else "")
    tags = ("<think>", "</think>", "<answer>", "</answer>")
    tag_free = not any(tag in body for body in (think, answer) for tag in tags)
    assert format_ok(text, strict=True) == tag_free
    assert format_ok(text) == tag_free  # strict => lenient
    assert not format_ok(" " + text, strict=True) and format_ok(" " + text) == tag_free
    assert r1_format_reward_strict("p", text, {}) == float(tag_free)


def test_prompt_whitespace_after_think_is_kept():
    """Before, `with_prompt_prefix` dropped the prompt's newline after `<think>`: open-r1's layout scored 0 strict."""
    completion = "a\n</think>\n<answer>\n5\n</answer>"
    assert with_prompt_prefix("Q<think>\n", completion) == "<think>\n" + completion
    assert r1_format_reward_strict("Q<think>\n", completion, {}) == 1.0
    assert r1_format_reward_strict("Q<think>", completion, {}) == 0.0  # no newline anywhere: not the strict layout
