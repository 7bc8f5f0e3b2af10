"""The detokenizer against each tokenizer's own decode: exact, never retracting, holding back only what it must."""

from __future__ import annotations

import codecs
import itertools
import random
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _cuts import cut_sizes, random_steps
from conftest import ChunkTokenizer
from tiny_tokenizers import corpus_text
from tokenrelay import Detokenizer, Tokenizer, TokenizerError
from tokenrelay._byte_table import UTF8_BAD, UTF8_STEP
from tokenrelay._window import _SETTLE, _WINDOW_HARD, _WINDOW_MAX

ALL = (
    "smollm2",
    "mistral-v1",
    "mistral-v3",
    "tekken",
    "hf-llama-style",
    "hf-gemma-style",
    "toy-bpe",
    "toy-wordpiece",
)
HF_BYTE_FALLBACK = ("hf-llama-style", "hf-gemma-style")
BYTE_TABLE = ALL[:-1]


def stream(tok: Tokenizer, steps: Sequence[Sequence[int]], **kwargs: object) -> list[str]:
    detok = Detokenizer(tok, **kwargs)  # type: ignore[arg-type]
    return [detok.feed(list(s)) for s in steps] + [detok.finish()]


def special_and_byte_ids(tok: Tokenizer) -> list[int]:
    table = tok.byte_table()
    if table is None:
        return []
    return sorted(table.special | table.byte_tokens)


@pytest.mark.parametrize("name", ALL)
def test_corpus_whole_one_at_a_time_and_random_groups(
    name: str, all_tokenizers: dict[str, Tokenizer]
) -> None:
    tok = all_tokenizers[name]
    ids = tok.encode(corpus_text())
    want = tok.decode(ids)
    assert "".join(stream(tok, [ids])) == want
    assert "".join(stream(tok, [[i] for i in ids])) == want
    single = Detokenizer(tok)
    assert "".join(single.feed(i) for i in ids) + single.finish() == want  # plain ints, not lists
    rng = random.Random(7)
    for _ in range(5):
        assert "".join(stream(tok, random_steps(ids, rng, 9))) == want


@pytest.mark.parametrize("name", ALL)
def test_builtins_choose_the_expected_path(name: str, all_tokenizers: dict[str, Tokenizer]) -> None:
    detok = Detokenizer(all_tokenizers[name])
    assert detok.uses_byte_table == (name in BYTE_TABLE)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("skip", [True, False])
def test_random_ids_with_specials_and_bytes(
    name: str, skip: bool, all_tokenizers: dict[str, Tokenizer]
) -> None:
    tok = all_tokenizers[name]
    pool = special_and_byte_ids(tok)
    rng = random.Random(hash((name, skip)) & 0xFFFF)
    for _ in range(60):
        ids = [
            rng.choice(pool) if pool and rng.random() < 0.4 else rng.randrange(tok.vocab_size)
            for _ in range(rng.randint(1, 25))
        ]
        want = tok.decode(ids, skip_special_tokens=skip)
        got = "".join(stream(tok, random_steps(ids, rng, 4), skip_special_tokens=skip))
        assert got == want, ids


@st.composite
def ids_and_cuts(draw: st.DrawFn, tok: Tokenizer) -> tuple[list[int], list[list[int]]]:
    pool = special_and_byte_ids(tok)
    id_st = st.integers(0, tok.vocab_size - 1)
    if pool:
        id_st = st.one_of(id_st, st.sampled_from(pool))
    ids = draw(st.lists(id_st, max_size=30))
    cuts = sorted(draw(st.sets(st.integers(0, len(ids)), max_size=len(ids) + 1)))
    steps = [ids[a:b] for a, b in zip([0, *cuts], [*cuts, len(ids)], strict=True)]
    return ids, steps


@pytest.mark.parametrize("name", ALL)
def test_property_exact_over_any_split(name: str, all_tokenizers: dict[str, Tokenizer]) -> None:
    tok = all_tokenizers[name]

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=ids_and_cuts(tok), skip=st.booleans())
    def check(case: tuple[list[int], list[list[int]]], skip: bool) -> None:
        ids, steps = case
        assert "".join(stream(tok, steps, skip_special_tokens=skip)) == tok.decode(
            ids, skip_special_tokens=skip
        )

    check()


@pytest.mark.parametrize("name", ALL)
def test_property_never_retracts(name: str, all_tokenizers: dict[str, Tokenizer]) -> None:
    """What was emitted after k ids is a prefix of the decode of those ids followed by *any* continuation."""
    tok = all_tokenizers[name]
    pool = special_and_byte_ids(tok)

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=ids_and_cuts(tok), data=st.data())
    def check(case: tuple[list[int], list[list[int]]], data: st.DataObject) -> None:
        _ids, steps = case
        detok = Detokenizer(tok)
        emitted = ""
        seen: list[int] = []
        for s in steps:
            emitted += detok.feed(s)
            seen += s
            cont_id = st.integers(0, tok.vocab_size - 1)
            if pool:
                cont_id = st.one_of(cont_id, st.sampled_from(pool))
            cont = data.draw(st.lists(cont_id, max_size=4))
            assert tok.decode(seen + cont).startswith(emitted), (seen, cont)

    check()


@pytest.mark.parametrize("name", ["smollm2", "tekken", "toy-bpe", "mistral-v1", "mistral-v3"])
def test_holds_back_at_most_one_incomplete_character(name: str, all_tokenizers: dict[str, Tokenizer]) -> None:
    tok = all_tokenizers[name]
    ids = tok.encode(corpus_text())
    per_byte = name.startswith("mistral")
    detok = Detokenizer(tok)
    emitted = ""
    for k, i in enumerate(ids, 1):
        emitted += detok.feed(i)
        held = detok.held_bytes
        assert held <= 3
        # What is missing is exactly the held character: one U+FFFD (or one per byte, SentencePiece) in the
        # reference decode of the prefix, and nothing else.
        stranded = "\ufffd" * (held if per_byte else min(held, 1))
        assert emitted + stranded == tok.decode(ids[:k])


@pytest.mark.parametrize("name", BYTE_TABLE)
def test_literal_replacement_character_is_emitted_at_once(
    name: str, all_tokenizers: dict[str, Tokenizer]
) -> None:
    tok = all_tokenizers[name]
    ids = tok.encode("tea \ufffd ready")
    detok = Detokenizer(tok)
    emitted = ""
    for k, i in enumerate(ids, 1):
        emitted += detok.feed(i)
        if detok.held_bytes == 0:
            assert emitted == tok.decode(ids[:k])
    assert "\ufffd" in emitted


@pytest.mark.parametrize("name", ["mistral-v1", "mistral-v3"])
def test_sentencepiece_first_token_space(name: str, builtin: dict[str, Tokenizer]) -> None:
    tok = builtin[name]
    ids = tok.encode("The chai is ready")
    detok = Detokenizer(tok)
    assert [detok.feed(i) for i in ids] == ["The", " ch", "ai", " is", " ready"]
    assert detok.finish() == ""


@pytest.mark.parametrize("sizes", [(1,), (5,), (1, 5), (5, 1), (2, 3, 4)])
def test_devanagari_cut_into_small_byte_tokens(sizes: tuple[int, ...]) -> None:
    text = "आपका चाय ☕ तैयार है"
    chunks = cut_sizes(text.encode(), sizes)
    tok = ChunkTokenizer(chunks)
    ids = tok.ids_for(chunks)
    detok = Detokenizer(tok)
    deltas = [detok.feed(i) for i in ids] + [detok.finish()]
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)
    assert detok.held_bytes == 0


@pytest.mark.parametrize("text", ["🦙", "👩‍💻", "a🦙b👩‍💻c"])
@pytest.mark.parametrize("name", ["smollm2", "mistral-v1", "mistral-v3", "tekken", *HF_BYTE_FALLBACK])
def test_emoji_split_across_tokens(text: str, name: str, all_tokenizers: dict[str, Tokenizer]) -> None:
    tok = all_tokenizers[name]
    ids = tok.encode(text)
    assert len(ids) > 1  # the emoji really is split across tokens
    deltas = stream(tok, [[i] for i in ids])
    assert "".join(deltas) == tok.decode(ids)
    assert not any("\ufffd" in d for d in deltas)


def test_emoji_split_at_every_byte() -> None:
    data = "🦙👩‍💻".encode()
    for cut in range(1, len(data)):
        chunks = [data[:cut], data[cut:]]
        tok = ChunkTokenizer(chunks)
        assert "".join(stream(tok, [[0], [1]])) == "🦙👩‍💻"


@pytest.mark.parametrize("name", ALL)
def test_prompt_ids_exclude_the_prompt(name: str, all_tokenizers: dict[str, Tokenizer]) -> None:
    tok = all_tokenizers[name]
    ids = tok.encode("Tea? 🦙 आपका चाय ☕ ready 👩‍💻 done")
    rng = random.Random(3)
    for cut in range(len(ids) + 1):
        prompt, gen = ids[:cut], ids[cut:]
        want = tok.decode(prompt + gen)[len(tok.decode(prompt)) :]
        got = "".join(stream(tok, random_steps(gen, rng, 3), prompt_ids=prompt))
        assert got == want, cut


def test_prompt_ending_mid_character_does_not_leak() -> None:
    data = "Hi 🦙".encode()
    chunks = [data[:5], data[5:6], data[6:]]  # the prompt ends two bytes into the llama
    tok = ChunkTokenizer(chunks)
    prompt = tok.ids_for(chunks[:1])
    detok = Detokenizer(tok, prompt_ids=prompt)
    out = detok.feed(tok.ids_for(chunks[1:])) + detok.finish()
    # decode(prompt) == "Hi \ufffd" (4 chars) and decode(all) == "Hi 🦙" (4 chars): nothing of the prompt leaks.
    assert out == ""


def test_stranded_bytes_replace_or_discard(builtin: dict[str, Tokenizer]) -> None:
    tok = builtin["mistral-v1"]
    ids = tok.encode("ok 🦙")[:-2]  # stop two byte tokens into the llama
    assert tok.decode(ids).endswith("\ufffd")
    keep = Detokenizer(tok)
    assert keep.feed(ids) + keep.finish() == tok.decode(ids)
    drop = Detokenizer(tok, stranded="discard")
    assert drop.feed(ids) + drop.finish() == tok.decode(ids).rstrip("\ufffd")
    with pytest.raises(ValueError, match="stranded"):
        Detokenizer(tok, stranded="keep")  # type: ignore[arg-type]
    late = Detokenizer(tok, stranded="discard")  # a relay learns the rule from its upstream as the reply goes
    text = late.feed(ids)
    assert late.stranded == "discard"
    late.stranded = "replace"
    assert text + late.finish() == tok.decode(ids)
    with pytest.raises(ValueError, match="stranded"):
        late.stranded = "keep"  # type: ignore[assignment]


@pytest.mark.parametrize("name", HF_BYTE_FALLBACK)
def test_byte_fallback_run_is_held_until_it_ends(name: str, all_tokenizers: dict[str, Tokenizer]) -> None:
    """HF ByteFallback: ☕ then a stray byte makes the *whole* run four U+FFFDs (vllm#17448)."""
    tok = all_tokenizers[name]
    b = {tok.decode([i], skip_special_tokens=False): i for i in sorted(tok.byte_table().byte_tokens)}  # type: ignore[union-attr]
    hf = tok.hf_tokenizer  # type: ignore[attr-defined]
    byte = [hf.token_to_id(f"<0x{x:02X}>") for x in (0xE2, 0x98, 0x95, 0xE2)]
    assert b  # the vocabulary has byte tokens
    detok = Detokenizer(tok)
    assert [detok.feed(i) for i in byte[:3]] == [
        "",
        "",
        "",
    ]  # ☕ is complete, yet a later byte could spoil it
    assert detok.feed(byte[3]) == ""
    assert detok.finish() == tok.decode(byte) == "\ufffd" * 4
    detok = Detokenizer(tok)
    word = tok.encode("tea")
    assert detok.feed(byte[:3]) + detok.feed(word) == tok.decode(byte[:3] + word)


def test_feed_piece_reports_the_ids_behind_each_piece(builtin: dict[str, Tokenizer]) -> None:
    tok = builtin["smollm2"]
    ids = tok.encode("chai ☕ and 🦙!")
    detok = Detokenizer(tok)
    pieces = [detok.feed_piece(i) for i in ids] + [detok.finish_piece()]
    assert "".join(p.text for p in pieces) == tok.decode(ids)
    assert [i for p in pieces for i in p.token_ids] == ids
    assert all(bool(p.text) == bool(p.token_ids) for p in pieces[:-1])


def test_feed_piece_attributes_held_bytes_to_the_piece_they_complete() -> None:
    chunks = [b"a\xf0\x9f", b"\xa6", b"\x99b"]
    tok = ChunkTokenizer(chunks)
    detok = Detokenizer(tok)
    got = [detok.feed_piece(i) for i in (0, 1, 2)] + [detok.finish_piece()]
    assert [(p.text, p.token_ids) for p in got] == [("a", (0,)), ("", ()), ("🦙b", (1, 2)), ("", ())]
    detok = Detokenizer(tok)
    first = detok.feed_piece([0, 1])
    last = detok.finish_piece()
    assert (first.text, first.token_ids, last.text, last.token_ids) == ("a", (0, 1), "\ufffd", ())


@pytest.mark.parametrize("name", ["smollm2", "toy-wordpiece"])
def test_bad_ids_raise_a_clear_error(name: str, all_tokenizers: dict[str, Tokenizer]) -> None:
    tok = all_tokenizers[name]
    for bad in (-1, tok.vocab_size, 10**9):
        with pytest.raises(TokenizerError, match="outside the vocabulary"):
            Detokenizer(tok).feed(bad)
        with pytest.raises(TokenizerError, match="outside the vocabulary"):
            Detokenizer(tok).feed([1, bad])


class CountingTokenizer:
    """Wraps a tokenizer and counts how many ids its decode is asked to look at."""

    def __init__(self, inner: Tokenizer) -> None:
        self.inner = inner
        self.decoded_ids = 0
        self.name = inner.name
        self.vocab_size = inner.vocab_size
        self.eos_token_ids = inner.eos_token_ids

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        self.decoded_ids += len(ids)
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)

    def byte_table(self) -> None:
        return None  # force the window fallback


@pytest.mark.parametrize("name", ["toy-wordpiece", "smollm2"])
def test_window_fallback_work_per_token_is_bounded(name: str, all_tokenizers: dict[str, Tokenizer]) -> None:
    inner = all_tokenizers[name]
    tok = CountingTokenizer(inner)
    ids = inner.encode(corpus_text()) * 6
    detok = Detokenizer(tok)
    out = []
    worst = 0
    for i in ids:
        before = tok.decoded_ids
        out.append(detok.feed(i))
        worst = max(worst, tok.decoded_ids - before)
    out.append(detok.finish())
    assert "".join(out) == inner.decode(ids)
    # Each step decodes at most a few windows' worth of ids, however long the stream is.
    assert worst <= 20 * _WINDOW_MAX


def test_byte_table_state_is_bounded_over_long_streams(builtin: dict[str, Tokenizer]) -> None:
    tok = builtin["smollm2"]
    ids = tok.encode(corpus_text()) * 20
    detok = Detokenizer(tok)
    for i in ids:
        detok.feed(i)
        assert detok.held_bytes <= 3
    assert not hasattr(detok, "_ids")  # no growing list of ids on the byte-table path


# -- any iterable of ids ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_feed_takes_any_iterable_of_ids(name: str, all_tokenizers: dict[str, Tokenizer]) -> None:
    """An iterator is read once: a batch the fast path hands to the slow path (a special, a byte run) keeps
    all its ids."""
    tok = all_tokenizers[name]
    pool = special_and_byte_ids(tok)
    rng = random.Random(23)
    text_ids = tok.encode("Tea? 🦙 आपका चाय ☕ ready")
    for _ in range(20):
        ids = list(text_ids)
        for _ in range(4):
            ids.insert(
                rng.randrange(len(ids) + 1), rng.choice(pool) if pool else rng.randrange(tok.vocab_size)
            )
        steps = random_steps(ids, rng, 6)
        for wrap in (iter, tuple, lambda s: (i for i in s), lambda s: map(int, s)):
            detok = Detokenizer(tok)
            got = detok.feed(text_ids[:2])  # leave the first-token rules behind: the fast path is live
            got += "".join(detok.feed(wrap(s)) for s in steps) + detok.finish()
            assert got == tok.decode(text_ids[:2] + ids), (wrap, steps)


# -- HF ByteFallback: a run that is already invalid streams at once ----------------------------------------------


def byte_token(tok: Tokenizer, value: int) -> int:
    return int(tok.hf_tokenizer.token_to_id(f"<0x{value:02X}>"))  # type: ignore[attr-defined]


_ENDINGS = [b""] + [
    bytes(c) for n in (1, 2, 3) for c in itertools.product((0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF), repeat=n)
]


def run_is_invalid_whatever_follows(run: bytes) -> bool:
    """Oracle: no continuation makes ``run`` valid UTF-8 (continuation bytes at each range's edges suffice)."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        decoder.decode(run, final=False)
    except UnicodeDecodeError:
        return True
    tail = decoder.getstate()[0]
    return not any(_completes(tail + end) for end in _ENDINGS)


def _completes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_utf8_validator_table_knows_when_a_run_can_no_longer_be_valid() -> None:
    """The table the byte-run path steps through, against the oracle: every 1- and 2-byte sequence, and 3- and
    4-byte ones over the bytes where UTF-8's ranges change (Python's own decoder notices ED A0 only later)."""

    def verdict(data: bytes) -> str:
        state = 0
        for byte in data:
            state = UTF8_STEP[state][byte]
            if state == UTF8_BAD:
                return "invalid"
        return "complete" if state == 0 else "partial"

    def oracle(data: bytes) -> str:
        if run_is_invalid_whatever_follows(data):
            return "invalid"
        return "complete" if _completes(data) else "partial"

    edges = [0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED]
    edges += [0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]
    cases = [bytes([a]) for a in range(256)] + [bytes([a, b]) for a in range(256) for b in range(256)]
    cases += [bytes(c) for n in (3, 4) for c in itertools.product(edges, repeat=n)]
    for data in cases:
        assert verdict(data) == oracle(data), data


@pytest.mark.parametrize("name", HF_BYTE_FALLBACK)
def test_invalid_byte_run_is_shown_at_once(name: str, all_tokenizers: dict[str, Tokenizer]) -> None:
    tok = all_tokenizers[name]
    tea = tok.encode("tea")
    # ☕ then a stray lead byte: valid until the end, so held (see the test above); ☕'s first two bytes then
    # "A" as a byte token: invalid at the third byte, whatever follows.
    ids = [*tea, *(byte_token(tok, b) for b in (0xE2, 0x98, 0x41, 0x80, 0xE2, 0x98)), *tea]
    detok = Detokenizer(tok)
    got = [detok.feed(i) for i in ids]
    n = len(tea)
    assert got[n : n + 6] == ["", "", "\ufffd" * 3, "\ufffd", "\ufffd", "\ufffd"]
    assert "".join(got) + detok.finish() == tok.decode(ids)


@pytest.mark.parametrize("name", HF_BYTE_FALLBACK)
def test_property_byte_runs_against_the_real_hf_decode(
    name: str, all_tokenizers: dict[str, Tokenizer]
) -> None:
    """After every id: what is shown is the HF decode of the ids so far minus a held run that is still valid;
    a run that is invalid whatever follows is not held at all; no continuation contradicts what was shown."""
    tok = all_tokenizers[name]
    words = [tok.encode(w) for w in ("tea", " 很", "!")]
    byte_values = [
        0x41,
        0x80,
        0xBF,
        0xC3,
        0xA9,
        0xE2,
        0x98,
        0x95,
        0xE5,
        0xBE,
        0x88,
        0xF0,
        0x9F,
        0xA6,
        0x99,
        0xFF,
    ]

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.lists(st.one_of(st.sampled_from(byte_values), st.sampled_from(range(len(words)))), max_size=14),
        st.lists(st.sampled_from(byte_values), max_size=3),
    )
    def check(items: list[int], cont_bytes: list[int]) -> None:
        ids: list[int] = []
        for item in items:
            ids += words[item] if item < len(words) else [byte_token(tok, item)]
        detok = Detokenizer(tok)
        shown = ""
        run = b""
        table = tok.byte_table()
        assert table is not None
        for k, i in enumerate(ids, 1):
            shown += detok.feed(i)
            run = run + table.pieces[i] if i in table.byte_tokens else b""
            ref = tok.decode(ids[:k])
            if run_is_invalid_whatever_follows(run) or not run:
                assert detok.held_bytes == 0 and shown == ref, (ids[:k], run)
            else:
                assert shown + "\ufffd" * len(run) == ref or shown + run.decode() == ref
            cont = [byte_token(tok, b) for b in cont_bytes]
            assert tok.decode(ids[:k] + cont).startswith(shown)
        assert shown + detok.finish() == tok.decode(ids)

    check()


# -- window fallback: invalid bytes stream, and the work per token stays bounded ---------------------------------


def invalid_byte_id(name: str, tok: Tokenizer) -> int:
    if name == "hf-llama-style":
        return byte_token(tok, 0x80)
    table = tok.byte_table()
    assert table is not None
    return next(i for i, p in enumerate(table.pieces) if bytes(p) == b"\x80")  # a lone continuation byte


@pytest.mark.parametrize("name", ["smollm2", "hf-llama-style"])
def test_window_streams_a_run_of_invalid_bytes_at_bounded_cost(
    name: str, all_tokenizers: dict[str, Tokenizer]
) -> None:
    """Forced onto the window: 1,500 stray bytes stream a few tokens behind (not at finish), and each step
    decodes a bounded number of ids (before: the window grew with the run, so each step cost O(run))."""
    inner = all_tokenizers[name]
    tok = CountingTokenizer(inner)
    bad = invalid_byte_id(name, inner)
    words = inner.encode("Tea for two 🦙 is ready.")
    ids = [*words, *[bad] * 1500, *words, *[bad] * 300, *words]
    want = inner.decode(ids)
    detok = Detokenizer(tok)
    shown = ""
    worst = 0
    lag = 0
    for k, i in enumerate(ids, 1):
        before = tok.decoded_ids
        shown += detok.feed(i)
        worst = max(worst, tok.decoded_ids - before)
        assert want.startswith(shown)
        if ids[k - 1] == bad:
            # Inside a run: everything but the newest few U+FFFDs is already out.
            lag = max(lag, len(inner.decode(ids[:k])) - len(shown))
    assert shown + detok.finish() == want
    assert lag <= _SETTLE + 2
    assert worst <= 8 * _WINDOW_MAX
    assert len(detok._window._ids) <= _WINDOW_MAX + 1  # type: ignore[union-attr]


def test_window_keeps_a_long_valid_byte_run_whole(all_tokenizers: dict[str, Tokenizer]) -> None:
    """A valid ByteFallback run cannot be shown before it ends (a later byte could spoil it all), so the window
    keeps its ids past the usual cut, and the result is still exact."""
    inner = all_tokenizers["hf-llama-style"]
    run = [byte_token(inner, b) for b in "很感谢你们的茶".encode() * 12]  # 252 byte tokens, all valid
    words = inner.encode("Tea is ready.")
    ids = [*words, *run, *words]
    tok = CountingTokenizer(inner)
    detok = Detokenizer(tok)
    assert len(run) < _WINDOW_HARD
    assert "".join(detok.feed(i) for i in ids) + detok.finish() == inner.decode(ids)


class MirrorTokenizer:
    """A decoder that is not local at all: the text comes out reversed, so every token rewrites its start."""

    name = "mirror"
    vocab_size = 26
    eos_token_ids: frozenset[int] = frozenset()

    def __init__(self) -> None:
        self.decoded_ids = 0

    def encode(self, text: str) -> list[int]:
        return [ord(c) - ord("a") for c in text]

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        self.decoded_ids += len(ids)
        return "".join(chr(ord("a") + i) for i in ids)[::-1]

    def byte_table(self) -> None:
        return None


def test_window_cost_stays_bounded_even_for_a_decoder_that_is_not_local() -> None:
    """No cut keeps the pending text of a mirrored decode: past _WINDOW_HARD ids the window is cut anyway
    (rule 4), so the work per token stays bounded, and every id's text still comes out exactly once."""
    tok = MirrorTokenizer()
    ids = [i % 26 for i in range(3 * _WINDOW_HARD)]
    detok = Detokenizer(tok)
    out, worst, longest = [], 0, 0
    for i in ids:
        before = tok.decoded_ids
        out.append(detok.feed(i))
        worst = max(worst, tok.decoded_ids - before)
        longest = max(longest, len(detok._window._ids))  # type: ignore[union-attr]
    text = "".join(out) + detok.finish()
    assert longest <= _WINDOW_HARD + 1
    assert worst <= 8 * _WINDOW_HARD
    assert len(text) == len(ids)  # nothing lost or repeated, though not in the reference's order
