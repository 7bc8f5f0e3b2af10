"""The window fallback (``_window.py``) on a ByteFallback vocabulary: a run of invalid bytes streams however the
ids are batched (issue 24), exactly, holding back at most ``_SETTLE`` ids, at two decodes a batch for text."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest

from _cuts import random_steps
from tiny_tokenizers import corpus_text, hf_gemma_style
from tokenrelay import Detokenizer, Tokenizer, load_tokenizer
from tokenrelay._window import _SETTLE, _WINDOW_MAX
from tokenrelay.tokenizers import mistral_data_path


class WindowOnly:
    """A real tokenizer forced onto the window fallback, counting its decode calls."""

    def __init__(self, inner: Tokenizer) -> None:
        self.inner = inner
        self.decodes = 0
        self.name = inner.name
        self.vocab_size = inner.vocab_size
        self.eos_token_ids = inner.eos_token_ids

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        self.decodes += 1
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)

    def byte_table(self) -> None:
        return None


@pytest.fixture(scope="module")
def gemma() -> WindowOnly:
    """Gemma's decoder chain (ByteFallback without Strip) over the Mistral v3 vocabulary, on the window."""
    return WindowOnly(
        load_tokenizer(hf_gemma_style(mistral_data_path("mistral_instruct_tokenizer_240323.model.v3")))
    )


def byte_ids(tok: WindowOnly, data: bytes) -> list[int]:
    hf = tok.inner.hf_tokenizer  # type: ignore[attr-defined]
    return [int(hf.token_to_id(f"<0x{b:02X}>")) for b in data]


# A run of lone continuation bytes (each one U+FFFD), and one that turns invalid at its third byte, inside ☕, so
# that the valid characters after it are U+FFFDs too (HF ByteFallback shows the whole run so).
RUNS = {
    "lone continuation bytes": b"\x80" * 128,
    "invalid mid-character": b"\xe2\x98" + "☕很 tea".encode() * 12,
}


@pytest.mark.parametrize("run", RUNS.values(), ids=RUNS.keys())
@pytest.mark.parametrize("batch", [4, 1, 2, 3, 5, 9])
def test_an_invalid_run_streams_whatever_the_batch(gemma: WindowOnly, run: bytes, batch: int) -> None:
    """A prompt of 5 text tokens, then the run fed ``batch`` ids a call: text in every call once ``_SETTLE`` ids
    are in (before: only at ``finish()``, 1 call of 33 for 128 ids in fours), each call's text a prefix of the
    reference, held ids at most ``_SETTLE``."""
    prompt = gemma.encode("Tea for two is ready")[:5]
    ids = byte_ids(gemma, run)
    assert len(prompt) == 5 and gemma.decode(prompt + ids).endswith("\ufffd" * len(ids))
    skip = len(gemma.decode(prompt))
    detok = Detokenizer(gemma, prompt_ids=prompt)
    assert not detok.uses_byte_table
    shown, calls = "", []
    for k in range(0, len(ids), batch):
        calls.append(detok.feed(ids[k : k + batch]))
        shown += calls[-1]
        want = gemma.decode(prompt + ids[: k + batch])[skip:]
        assert want.startswith(shown)
        assert detok.held_bytes <= _SETTLE
        assert len(want) - len(shown) <= _SETTLE
        assert len(detok._window._ids) <= _WINDOW_MAX + batch + _SETTLE  # type: ignore[union-attr]
    calls.append(detok.finish())
    assert "".join(calls) == gemma.decode(prompt + ids)[skip:]
    assert detok.held_bytes == 0
    # Once _SETTLE ids of the run are in, every call shows text; in fours (the case) and more, no
    # two calls in a row are silent.
    fed = [min(len(ids), k + batch) for k in range(0, len(ids), batch)]
    assert all(text for text, n in zip(calls, fed, strict=False) if n > _SETTLE), [len(c) for c in calls]
    if batch >= 3:
        assert not any(a == b == "" for a, b in itertools.pairwise(calls)), [len(c) for c in calls]


@pytest.mark.parametrize("run", RUNS.values(), ids=RUNS.keys())
def test_an_invalid_run_is_exact_over_every_split(gemma: WindowOnly, run: bytes) -> None:
    """Text before, the run, text after: every two-piece split, one id at a time, in fours and random batches,
    after prompts of 1 to 12 ids. The run is longer than the window, so the window is cut inside it (before:
    cut from a lead byte, the kept part of an invalid run decoded as text again: single ids streamed
    ``a☕很 tea`` where the reference has U+FFFDs)."""
    words = gemma.encode("Tea for two 🦙 is ready. Tea for two")
    after = gemma.encode(" is ready.")

    def joined(steps: list[list[int]]) -> str:
        detok = Detokenizer(gemma)
        return "".join(detok.feed(s) for s in steps) + detok.finish()

    rng = random.Random(24)
    for lead in range(1, 13):
        ids = [*words[:lead], *byte_ids(gemma, run), *after]
        want = gemma.decode(ids)
        assert "\ufffd" * len(run) in want and len(run) > _WINDOW_MAX + _SETTLE
        assert joined([[i] for i in ids]) == want, lead
        assert joined([ids[k : k + 4] for k in range(0, len(ids), 4)]) == want, lead
        for _ in range(5):
            assert joined(random_steps(ids, rng, 9)) == want, lead
        if lead == 5:
            for k in range(len(ids) + 1):
                assert joined([ids[:k], ids[k:]]) == want, k


def test_text_batches_still_cost_two_decodes(gemma: WindowOnly) -> None:
    """The inner decodes of a batch are made only while rule 1 holds text back (a trailing U+FFFD, or text the
    newest id rewrote): a batch of text costs two decodes, as before."""
    ids = gemma.encode(corpus_text())
    detok = Detokenizer(gemma)
    window = detok._window
    assert window is not None
    plain = 0
    for k in range(0, len(ids), 4):
        step = ids[k : k + 4]
        prev, text = gemma.inner.decode(ids[: k + len(step) - 1]), gemma.inner.decode(ids[: k + len(step)])
        before, size = gemma.decodes, len(window._ids)
        detok.feed(step)
        if size <= _WINDOW_MAX and text.startswith(prev) and not prev.endswith("\ufffd"):  # no cut tried
            assert gemma.decodes - before == 2
            plain += 1
    assert plain > len(ids) // 8  # most batches were text
