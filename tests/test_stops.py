"""StopMatcher: the rules in the module docstring, each against an obvious (quadratic) oracle."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _cuts import random_cut
from tokenrelay._stops import StopMatcher

CORPUS = Path(__file__).resolve().parent / "data" / "multilingual.txt"


def oracle(text: str, stops: Sequence[str], include_stop: bool = False) -> tuple[str, str | None]:
    """One-shot answer: the first end position where any stop ends; ties go to the first listed."""
    for end in range(1, len(text) + 1):
        for stop in stops:
            if text.endswith(stop, 0, end):
                cut = end if include_stop else end - len(stop)
                return text[:cut], stop
    return text, None


def min_holdback(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of some stop."""
    best = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:k]):
                best = k
                break
    return best


def run(stops: Sequence[str], deltas: Sequence[str], include_stop: bool = False) -> tuple[str, str | None]:
    m = StopMatcher(stops, include_stop=include_stop)
    out = "".join(m.feed(d) for d in deltas) + m.finish()
    return out, m.matched


# -- rule 1: hold back only a possible stop prefix -------------------------------------------------


def test_text_that_cannot_start_a_stop_goes_out_at_once() -> None:
    m = StopMatcher(["\n\nUser:", "x" * 200])
    assert m.feed("Hello world") == "Hello world"
    assert m.held == ""


def test_holds_back_only_the_prefix_that_matches() -> None:
    m = StopMatcher(["\n\nUser:"])
    assert m.feed("Hello\n") == "Hello"
    assert m.held == "\n"
    assert m.feed("\nUs") == ""
    assert m.held == "\n\nUs"
    # "\n\nUse" is no longer a prefix once "r" is followed by "!"; all of it goes out.
    assert m.feed("er!") == "\n\nUser!"
    assert m.held == ""
    assert not m.stopped


def test_holdback_shrinks_to_a_shorter_prefix_via_failure_link() -> None:
    m = StopMatcher(["abab"])
    assert m.feed("aba") == ""
    assert m.feed("a") == "aba"  # "abaa": only the last "a" can still start "abab"
    assert m.held == "a"
    assert m.feed("bab") == ""
    assert m.matched == "abab"


def test_finish_releases_the_held_tail() -> None:
    m = StopMatcher(["STOP"])
    assert m.feed("go ST") == "go "
    assert m.finish() == "ST"
    assert not m.stopped


@given(st.text("abc", max_size=30), st.lists(st.text("abc", min_size=1, max_size=4), min_size=1, max_size=4))
@settings(max_examples=300, deadline=None)
def test_emitted_is_always_text_minus_minimal_holdback(text: str, stops: list[str]) -> None:
    m = StopMatcher(stops)
    emitted = ""
    for i, char in enumerate(text):
        emitted += m.feed(char)
        if m.stopped:
            break
        seen = text[: i + 1]
        assert emitted == seen[: len(seen) - min_holdback(seen, stops)]


# -- rule 2: found anywhere ------------------------------------------------------------------------


def test_stop_inside_one_delta_cuts_the_rest() -> None:
    m = StopMatcher(["<|end|>"])
    assert m.feed("answer<|end|>garbage after") == "answer"
    assert m.stopped and m.matched == "<|end|>"
    assert m.feed("more") == ""
    assert m.finish() == ""


def test_stop_spread_over_many_deltas() -> None:
    text = "The reply is here.\n\nUser: next turn"
    stops = ["\n\nUser:"]
    for size in (1, 2, 3, 5):
        deltas = [text[i : i + size] for i in range(0, len(text), size)]
        assert run(stops, deltas) == ("The reply is here.", "\n\nUser:")


def test_failure_links_find_a_stop_after_a_false_start() -> None:
    assert run(["aab"], ["a", "a", "a", "b"]) == ("a", "aab")
    assert run(["she", "he", "his", "hers"], ["us", "he", "rs"]) == ("u", "she")
    assert run(["he", "she", "his", "hers"], ["us", "he", "rs"]) == ("us", "he")


# -- rule 3: earliest completion, ties by list order -----------------------------------------------


def test_earliest_completing_stop_wins_over_earlier_starting_one() -> None:
    # "abcd" starts first but "bc" completes first.
    assert run(["abcd", "bc"], ["xabcd"]) == ("xa", "bc")


def test_tie_at_the_same_character_goes_to_list_order() -> None:
    assert run(["</s>", "s>"], ["a</s>"]) == ("a", "</s>")
    assert run(["s>", "</s>"], ["a</s>"]) == ("a</", "s>")
    assert run(["s>", "</s>"], ["a</", "s>"]) == ("a</", "s>")


def test_duplicate_stops_are_harmless() -> None:
    assert run(["x", "x"], ["abxc"]) == ("ab", "x")


# -- rule 4: include_stop --------------------------------------------------------------------------


def test_include_stop_keeps_the_stop_and_nothing_after() -> None:
    assert run(["\n\n"], ["one\n", "\ntwo"], include_stop=True) == ("one\n\n", "\n\n")
    assert run(["abcd", "bc"], ["xab", "cd"], include_stop=True) == ("xabc", "bc")


# -- rule 5 and argument checks --------------------------------------------------------------------


def test_no_stops_passes_everything_through() -> None:
    m = StopMatcher([])
    assert m.feed("anything") == "anything"
    assert m.finish() == ""


@pytest.mark.parametrize("bad", [[""], ["ok", ""]])
def test_empty_stop_is_refused(bad: list[str]) -> None:
    with pytest.raises(ValueError, match="empty stop"):
        StopMatcher(bad)


def test_a_bare_string_is_refused() -> None:
    with pytest.raises(TypeError):
        StopMatcher("stop")


def test_every_split_offset_and_one_char_at_a_time() -> None:
    text = "Привет 🦙 мир!\n\nUser: 你好 ☕ STOP and more"
    for stops in (["\n\nUser:"], ["☕ ST"], ["мир!"], ["🦙"], ["never"]):
        expected = oracle(text, stops)
        assert run(stops, list(text)) == expected
        for cut in range(len(text) + 1):
            assert run(stops, [text[:cut], text[cut:]]) == expected


def test_multilingual_corpus_random_splits() -> None:
    text = CORPUS.read_bytes().decode("utf-8")
    rng = random.Random(1234)
    stop_sets = [
        ["👨‍👩‍👧‍👦"],
        ["क्षत्रिय", "カタカナ"],
        ["\n\nEmoji:", "세계."],
        ["Γειά σου"],
        ["zzz-not-in-corpus", "qqq"],
    ]
    for stops in stop_sets:
        for include in (False, True):
            expected = oracle(text, stops, include)
            for _ in range(20):
                assert run(stops, random_cut(text, rng), include) == expected


def test_many_stops_agree_with_the_oracle() -> None:
    rng = random.Random(7)
    stops = ["".join(rng.choice("abcde") for _ in range(rng.randint(2, 9))) for _ in range(256)]
    for _ in range(50):
        text = "".join(rng.choice("abcdef ") for _ in range(300))
        expected = oracle(text, stops)
        assert run(stops, random_cut(text, rng)) == expected


@given(
    st.text("abc", max_size=40),
    st.lists(st.text("abc", min_size=1, max_size=5), min_size=1, max_size=5),
    st.booleans(),
    st.randoms(use_true_random=False),
)
@settings(max_examples=300, deadline=None)
def test_any_split_equals_the_oracle(text: str, stops: list[str], include: bool, rng: random.Random) -> None:
    expected = oracle(text, stops, include)
    assert run(stops, [text], include) == expected
    assert run(stops, random_cut(text, rng), include) == expected
