"""TextStream: ids in, deltas + one Finished out, checked against each tokenizer's own decode."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _cuts import random_steps
from tokenrelay._protocols import Tokenizer
from tokenrelay._stream import Finished, TextDelta, TextStream, Timings, Usage, percentile
from tokenrelay.tokenizers import load_tokenizer

CORPUS = (Path(__file__).resolve().parent / "data" / "multilingual.txt").read_bytes().decode("utf-8")
TOKENIZERS = ["smollm2", "mistral-v3"]


@pytest.fixture(scope="module", params=TOKENIZERS)
def tok(request: pytest.FixtureRequest) -> Tokenizer:
    return load_tokenizer(request.param)


def smollm2() -> Tokenizer:
    return load_tokenizer("smollm2")


def eos(tokenizer: Tokenizer) -> int:
    return min(tokenizer.eos_token_ids)


def drive(stream: TextStream, steps: Sequence[Sequence[int]]) -> tuple[list[TextDelta], Finished]:
    """Feed steps until the stream finishes (or finish it when the steps run out)."""
    deltas: list[TextDelta] = []
    events = []
    for step in steps:
        events += stream.feed(step)
        if stream.finished is not None:
            break
    else:
        events += stream.finish()
    for event in events[:-1]:
        assert isinstance(event, TextDelta)
        deltas.append(event)
    final = events[-1]
    assert isinstance(final, Finished)
    assert stream.finished is final
    return deltas, final


def check_invariants(deltas: list[TextDelta], final: Finished, ids: Sequence[int]) -> str:
    """No empty delta; ids of deltas + Finished are the consumed prefix of ``ids``; return the text."""
    assert all(d.text for d in deltas)
    carried = [i for d in deltas for i in d.token_ids] + list(final.token_ids)
    assert carried == list(ids[: final.usage.completion_tokens])
    return "".join(d.text for d in deltas)


# -- the contract over splits ----------------------------------------------------------------------------


def test_corpus_any_split_gives_the_reference_decode(tok: Tokenizer) -> None:
    ids = tok.encode(CORPUS)
    expected = tok.decode(ids)
    rng = random.Random(5)
    splits = [[[i] for i in ids], [list(ids)]] + [random_steps(ids, rng) for _ in range(10)]
    for steps in splits:
        stream = TextStream(tok, stop_token_ids=[], max_tokens=None)
        deltas, final = drive(stream, [*steps, [eos(tok)]])
        assert check_invariants(deltas, final, [*ids, eos(tok)]) == expected
        assert stream.text == expected
        assert final.reason == "stop" and final.matched == eos(tok)
        assert final.token_ids[-1] == eos(tok)
        assert final.usage == Usage(prompt_tokens=0, completion_tokens=len(ids) + 1)


def test_one_delta_per_step_at_most() -> None:
    tok = smollm2()
    ids = tok.encode("Hello there, friend. ☕ 👩‍💻")
    stream = TextStream(tok)
    for step in random_steps(ids, random.Random(1), most=5):
        events = stream.feed(step)
        assert len(events) <= 1
        assert all(isinstance(e, TextDelta) for e in events)


@given(st.lists(st.integers(0, 49151), max_size=40), st.randoms(use_true_random=False))
@settings(max_examples=150, deadline=None)
def test_random_ids_decode_like_the_tokenizer(ids: list[int], rng: random.Random) -> None:
    tok = smollm2()
    ids = [i for i in ids if i not in tok.eos_token_ids]
    deltas, final = drive(TextStream(tok), random_steps(ids, rng))
    assert check_invariants(deltas, final, ids) == tok.decode(ids)
    assert final.reason == "stop" and final.matched is None


# -- stop strings ------------------------------------------------------------------------------------------


def first_completing_prefix(tok: Tokenizer, ids: Sequence[int], stop: str) -> int:
    """Oracle: the fewest ids whose reference decode contains ``stop``."""
    return next(k for k in range(1, len(ids) + 1) if stop in tok.decode(ids[:k]))


@pytest.mark.parametrize("stop", ["☕", "世界", "\n\nEmoji:", "क्षत्रिय", "Γειά"])
def test_stop_string_cuts_text_and_counts_tokens(tok: Tokenizer, stop: str) -> None:
    ids = tok.encode(CORPUS)
    text = tok.decode(ids)
    expected_tokens = first_completing_prefix(tok, ids, stop)
    for seed in range(4):
        steps = random_steps(ids, random.Random(seed))
        deltas, final = drive(TextStream(tok, stops=[stop, "never-in-corpus"]), steps)
        assert check_invariants(deltas, final, ids) == text[: text.index(stop)]
        assert (final.reason, final.matched) == ("stop", stop)
        assert final.usage.completion_tokens == expected_tokens


def completing_prefix(tok: Tokenizer, ids: Sequence[int], text_to_stop_end: str) -> int:
    """Oracle: the fewest ids whose reference decode shows the text up to the end of the stop, where it stands."""
    return next(k for k in range(1, len(ids) + 1) if tok.decode(ids[:k]).startswith(text_to_stop_end))


HEN = ["<0xE5>", "<0xBE>", "<0x88>"]  # 很 as byte-fallback tokens
GAN = ["<0xE6>", "<0x84>", "<0x9F>"]  # 感

# (tokenizer, text or pieces, stop): stops whose last character comes from a token the detokenizer may hold
# back. The HF ByteFallback twin of Mistral v3 holds a run of byte tokens until it ends (SentencePiece's own
# decode, "mistral-v3", shows 很 at its last byte); WordPiece goes through the window, which shows text one
# token late.
HELD_BACK_STOPS = [
    ("mistral-v3", ["▁", "我", *HEN, "感", "谢"], "很"),
    ("mistral-v3", ["▁", "我", *HEN, *GAN, "谢"], "很"),
    ("hf-llama-style", ["▁", "我", *HEN, "感", "谢"], "很"),
    ("hf-llama-style", ["▁", "我", *HEN, *GAN, "谢"], "很"),
    ("hf-llama-style", ["▁", "我", *HEN, *GAN, "谢"], "我很"),
    ("hf-llama-style", ["▁x", *HEN, "<0x80>", "谢"], "x"),
    ("toy-wordpiece", ["a", "##b", "##c", "##d", "##e", "Z"], "cd"),  # "abcde Z"
    ("toy-wordpiece", "the tea is ready now", "is"),
]


def ids_of(tok: Tokenizer, pieces: Sequence[str]) -> list[int]:
    hf = getattr(tok, "hf_tokenizer", None)
    to_id = hf.token_to_id if hf is not None else tok._sp.piece_to_id  # type: ignore[attr-defined]
    ids = [to_id(p) for p in pieces]
    assert all(isinstance(i, int) and i > 0 for i in ids), (
        pieces,
        ids,
    )  # 0 is <unk>: a piece not in the vocab
    return ids


@pytest.mark.parametrize(("name", "text", "stop"), HELD_BACK_STOPS)
@pytest.mark.parametrize("then", ["more", "eos", "engine-ends", "length"])
def test_stop_is_charged_to_the_id_that_completed_it(
    name: str, text: str | list[str], stop: str, then: str, all_tokenizers: dict[str, Tokenizer]
) -> None:
    tok = all_tokenizers[name]
    ids = tok.encode(text) if isinstance(text, str) else ids_of(tok, text)
    full = tok.decode(ids)
    end = full.index(stop) + len(stop)
    k = completing_prefix(tok, ids, full[:end])
    assert k < len(ids)  # something follows the stop, so being one token late would show
    fed = {
        "more": ids,
        "eos": [*ids[:k], *([eos(tok)] if tok.eos_token_ids else [])],
        "engine-ends": ids[:k],
        "length": ids,
    }[then]
    stream = TextStream(tok, stops=[stop], max_tokens=k if then == "length" else None)
    deltas, final = drive(stream, [[i] for i in fed])
    assert check_invariants(deltas, final, ids) == full[: end - len(stop)]
    assert (final.reason, final.matched) == ("stop", stop)
    assert final.usage.completion_tokens == k
    assert [i for d in deltas for i in d.token_ids] + list(final.token_ids) == ids[:k]


@pytest.mark.parametrize("name", ["mistral-v3", "hf-llama-style", "toy-wordpiece", "smollm2"])
def test_property_stop_usage_ends_at_the_completing_id(
    name: str, all_tokenizers: dict[str, Tokenizer]
) -> None:
    """Any stretch of the corpus, any stop taken from its text, any split: usage ends at the completing id."""
    tok = all_tokenizers[name]
    corpus_ids = tok.encode(CORPUS)

    @given(st.integers(0, len(corpus_ids) - 2), st.integers(2, 40), st.data())
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    def check(start: int, size: int, data: st.DataObject) -> None:
        ids = corpus_ids[start : start + size]
        full = tok.decode(ids)
        if not full.strip("\ufffd"):
            return
        a = data.draw(st.integers(0, len(full) - 1))
        b = data.draw(st.integers(a + 1, min(len(full), a + 4)))
        stop = full[a:b]
        if "\ufffd" in stop:
            return  # a prefix's unfinished character shows as U+FFFD: the oracle below would find it early
        end = full.index(stop) + len(stop)
        k = completing_prefix(tok, ids, full[:end])
        rng = random.Random(data.draw(st.integers(0, 2**16)))
        deltas, final = drive(TextStream(tok, stops=[stop]), random_steps(ids, rng))
        assert check_invariants(deltas, final, ids) == full[: end - len(stop)]
        assert final.matched == stop
        assert final.usage.completion_tokens == k, (ids, stop)

    check()


def test_include_stop_keeps_the_stop_text() -> None:
    tok = smollm2()
    ids = tok.encode("one two\n\nUser: three")
    deltas, final = drive(TextStream(tok, stops=["\n\nUser:"], include_stop=True), [[i] for i in ids])
    assert check_invariants(deltas, final, ids) == "one two\n\nUser:"


def test_held_stop_prefix_is_released_when_the_engine_ends() -> None:
    tok = smollm2()
    ids = tok.encode("partial answer\n\nUs")
    stream = TextStream(tok, stops=["\n\nUser:"])
    early = [e for i in ids for e in stream.feed(i)]
    assert "".join(e.text for e in early if isinstance(e, TextDelta)) == "partial answer"
    *last, final = stream.finish()
    assert [e.text for e in last if isinstance(e, TextDelta)] == ["\n\nUs"]
    assert isinstance(final, Finished) and final.reason == "stop" and final.matched is None
    assert stream.finish() == []  # input after it raises: tests/test_end_rule.py


def cut_at_first_stop(text: str, stops: Sequence[str]) -> str:
    """Oracle: the text before the stop that completes first (ties: first listed)."""
    for end in range(1, len(text) + 1):
        for stop in stops:
            if text.endswith(stop, 0, end):
                return text[: end - len(stop)]
    return text


@given(
    st.text("ab ☕é世\n", max_size=40),
    st.lists(st.text("ab ☕é世\n", min_size=1, max_size=3), max_size=3),
    st.randoms(use_true_random=False),
)
@settings(max_examples=150, deadline=None)
def test_any_text_any_stops_any_split(text: str, stops: list[str], rng: random.Random) -> None:
    tok = smollm2()
    ids = tok.encode(text)
    deltas, final = drive(TextStream(tok, stops=stops), random_steps(ids, rng))
    assert check_invariants(deltas, final, ids) == cut_at_first_stop(tok.decode(ids), stops)


# -- stop ids, EOS and max_tokens ----------------------------------------------------------------------------


def test_eos_mid_step_drops_what_follows() -> None:
    tok = smollm2()
    ids = tok.encode("The chai is ready. More text that must not appear.")
    stream = TextStream(tok)
    deltas, final = drive(stream, [ids[:4], [*ids[4:6], eos(tok), *ids[6:]]])
    assert check_invariants(deltas, final, [*ids[:6], eos(tok)]) == tok.decode(ids[:6])
    assert (final.reason, final.matched, final.usage.completion_tokens) == ("stop", eos(tok), 7)


def test_custom_stop_token_id_and_ignore_eos() -> None:
    tok = smollm2()
    ids = tok.encode("alpha beta gamma delta")
    stream = TextStream(tok, stop_token_ids=[ids[2]], ignore_eos=True)
    deltas, final = drive(stream, [[ids[0], eos(tok)], ids[1:]])
    # With ignore_eos the EOS id is an ordinary (special, skipped) token; the custom id ends the reply.
    assert check_invariants(deltas, final, [ids[0], eos(tok), *ids[1:]]) == tok.decode(ids[:2])
    assert (final.reason, final.matched) == ("stop", ids[2])


@pytest.mark.parametrize("max_tokens", [1, 2, 7, 30])
def test_max_tokens_is_length(tok: Tokenizer, max_tokens: int) -> None:
    ids = tok.encode(CORPUS)
    deltas, final = drive(TextStream(tok, max_tokens=max_tokens), [ids[:3], ids[3:]])
    assert check_invariants(deltas, final, ids) == tok.decode(ids[:max_tokens])
    assert (final.reason, final.usage.completion_tokens) == ("length", max_tokens)


def test_a_cut_character_ends_as_set_before_the_last_id() -> None:
    tok = smollm2()
    ids = tok.encode("Tea 🦙")[:-1]  # max_tokens cuts the llama after two of its three bytes
    cases: list[tuple[Literal["replace", "discard"], str]] = [("replace", "\ufffd"), ("discard", "")]
    for policy, end in cases:
        stream = TextStream(
            tok, max_tokens=len(ids), stranded="discard" if policy == "replace" else "replace"
        )
        events = stream.feed(ids[:-1])
        stream.set_stranded(policy)  # an upstream's text said so, before the ids that end the reply
        events += stream.feed(ids[-1:])
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Tea " + end
        assert isinstance(events[-1], Finished) and events[-1].reason == "length"


def test_eos_on_the_last_allowed_token_is_stop_not_length() -> None:
    tok = smollm2()
    ids = [*tok.encode("short reply"), eos(tok)]
    deltas, final = drive(TextStream(tok, max_tokens=len(ids)), [ids])
    assert check_invariants(deltas, final, ids) == "short reply"
    assert (final.reason, final.matched, final.usage.completion_tokens) == ("stop", eos(tok), len(ids))


def test_stop_string_on_the_last_allowed_token_is_stop_not_length() -> None:
    tok = smollm2()
    ids = tok.encode("before STOP after")
    k = first_completing_prefix(tok, ids, "STOP")
    deltas, final = drive(TextStream(tok, stops=["STOP"], max_tokens=k), [[i] for i in ids])
    assert check_invariants(deltas, final, ids) == "before "
    assert (final.reason, final.matched, final.usage.completion_tokens) == ("stop", "STOP", k)


def test_usage_counts_the_prompt() -> None:
    tok = smollm2()
    prompt = tok.encode("You are a bot. Say hi.")
    reply = tok.encode(" Hi!")
    stream = TextStream(tok, prompt_ids=prompt)
    deltas, final = drive(stream, [[i] for i in reply])
    assert check_invariants(deltas, final, reply) == tok.decode(prompt + reply)[len(tok.decode(prompt)) :]
    assert final.usage == Usage(len(prompt), len(reply))
    assert final.usage.total_tokens == len(prompt) + len(reply)


def test_bad_max_tokens_is_refused() -> None:
    with pytest.raises(ValueError):
        TextStream(smollm2(), max_tokens=0)


# -- timings -------------------------------------------------------------------------------------------------


def test_timings_come_from_the_callers_timestamps() -> None:
    tok = smollm2()
    ids = tok.encode("one two three four five")
    stream = TextStream(tok, started_at=100.0)
    times = [100.5 + 0.25 * i * i for i in range(len(ids))]
    delta_times = [t for i, t in zip(ids, times, strict=True) for _ in stream.feed(i, now=t)]
    (final,) = stream.finish(now=200.0)
    assert isinstance(final, Finished) and final.timings is not None
    assert final.timings.ttft == pytest.approx(delta_times[0] - 100.0)
    assert final.timings.gaps == pytest.approx([b - a for a, b in itertools.pairwise(delta_times)])
    assert final.timings.total == pytest.approx(100.0)
    assert stream.timings() == final.timings
    gaps = np.array(final.timings.gaps)
    assert final.timings.p50 == pytest.approx(np.percentile(gaps, 50))
    assert final.timings.p95 == pytest.approx(np.percentile(gaps, 95))


def test_timings_without_timestamps_are_none() -> None:
    tok = smollm2()
    stream = TextStream(tok)
    stream.feed(tok.encode("hello"))
    assert stream.timings() == Timings(ttft=None, gaps=(), total=None)
    assert stream.timings().p50 is None


@given(st.lists(st.floats(0, 1e3), min_size=1, max_size=50), st.floats(0, 100))
@settings(max_examples=200, deadline=None)
def test_percentile_matches_numpy(values: list[float], q: float) -> None:
    assert percentile(values, q) == pytest.approx(np.percentile(values, q))
