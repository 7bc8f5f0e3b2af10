"""The detokenizer's fallback for decoders that are not byte-representable: re-decode a bounded window of ids.

Used by ``Detokenizer`` when ``tokenizer.byte_table()`` is ``None`` (WordPiece, cleanup rules, decoder chains the
byte table does not model). Rules, each tested in ``tests/test_detokenizer.py`` and ``tests/test_window.py``:

1. Text is emitted once one further token has not changed it: cleanup rules such as `` 's`` → ``'s`` rewrite
   only the text next to the newest token.
2. A trailing U+FFFD may be an unfinished character that a later token completes (or, under HF ByteFallback, a
   whole run of byte tokens that turns back into text), so rule 1 holds it. It is released once it stood at the
   same place after each of the last ``_SETTLE`` tokens as well: an unfinished character spans at most four
   bytes, so it shows as U+FFFD after at most three consecutive tokens. A run of invalid bytes therefore
   streams ``_SETTLE`` tokens behind instead of waiting for ``finish()``, however the ids are batched: a
   ``feed`` of several ids decodes the window after each of its newest ones as well (only while rule 1 holds
   text back, so text costs two decodes a batch), and the rule sees the same decodes as for single ids
   (issue 24: four ids per ``feed`` showed such a run only at ``finish()``).
3. When the window holds more than ``_WINDOW_MAX`` ids it is cut back to its newest ids, kept as context, so its
   cost per token is bounded. A cut is taken only where the kept ids still decode to the text not yet emitted:
   ``_WINDOW_KEEP`` ids and a few more, or all the ids since text was last emitted plus ``_WINDOW_KEEP``
   (a long valid ByteFallback run cannot be shown before it ends, so its ids must stay). Where U+FFFDs run
   on from the emitted text into the pending text, the kept ids must also decode to the recent decodes less
   each of the newest few ids: cut inside an invalid ByteFallback run, bytes that were U+FFFDs could
   otherwise form text again. Exactness rests on the decoder being local (the usual assumption of window
   detokenizers), which the tests check on WordPiece, byte-level and ByteFallback vocabularies.
4. Only a decoder that keeps rewriting text more than ``_WINDOW_HARD`` ids back would find no cut; then the text
   not yet emitted is emitted as decoded so far and the window starts again from its newest ids: bounded cost
   per token before exactness for such a decoder.

A limit of any window over decodes alone: it cannot tell a byte-fallback token from a text token. Under HF
ByteFallback a valid run that ends in an ASCII byte token (``<0x41>``) looks like text and is emitted by rule 1;
a stray byte after it turns the whole run into U+FFFDs in the reference. The HF chains with ByteFallback that
tokenrelay knows (Llama/Mistral, Gemma) have byte tables, which hold such a run until it ends.

Sans-I/O: standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._errors import TokenizerError
from ._protocols import Tokenizer

_WINDOW_KEEP = 16  # ids kept when the window is re-anchored
_WINDOW_MAX = 64  # the window is re-anchored once it holds more ids than this
_WINDOW_HARD = 16 * _WINDOW_MAX  # ... and cut even where no cut keeps the pending text, past this many
_CUT_TRIES = 4  # short cuts tried per re-anchoring (keeping _WINDOW_KEEP, +1, +2, ... ids)
_SETTLE = 4  # tokens a trailing U+FFFD must survive at the same place before it is emitted


def _agreed(texts: Sequence[str]) -> int:
    """Length of the longest common prefix of ``texts`` (that of the least and greatest, in string order)."""
    lo, hi = min(texts), max(texts)
    if hi.startswith(lo):
        return len(lo)
    return next(i for i, (a, b) in enumerate(zip(lo, hi, strict=False)) if a != b)


class WindowDecoder:
    """Incremental decode by re-decoding a bounded window of ids (see the module docstring)."""

    def __init__(self, tokenizer: Tokenizer, skip: bool) -> None:
        self._tok = tokenizer
        self._skip = skip
        self._ids: list[int] = []
        self._done = 0  # characters of decode(self._ids) already emitted (or belonging to the prompt)
        self._vocab = tokenizer.vocab_size
        # decode(self._ids) after each of the last feeds, oldest first, all from the same anchor: the newest is
        # the previous step's text, so a step costs one decode, not two.
        self._history: list[str] = []
        # What the latest feed()/finish() emitted, for ids_after(): its start in window text coordinates, the
        # text it was cut from, and how many ids the window held when that text was complete.
        self._last_start = 0
        self._last_source = ""
        self._last_ids = 0
        self._emitted_at = 0  # ids in the window when text was last emitted
        self._forced = 0  # characters at the start of the latest feed's text that rule 4 emitted

    def _decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=self._skip)

    def prime(self, prompt: Sequence[int]) -> None:
        self._ids = list(prompt[-_WINDOW_KEEP:])
        text = self._decode(self._ids)
        self._done = len(text)
        self._emitted_at = len(self._ids)
        self._history = [text]

    def feed(self, ids: list[int]) -> str:
        for i in ids:
            if not isinstance(i, int) or not 0 <= i < self._vocab:
                raise TokenizerError(f"token id {i!r} is outside the vocabulary (0..{self._vocab - 1})")
        self._last_start, self._last_source = self._done, ""
        if not ids:
            return ""
        forced = self._reanchor() if len(self._ids) > _WINDOW_MAX else ""
        self._forced = len(forced)
        history = self._history
        m = len(ids)
        known = m == 1 and bool(history)  # the history ends with the window's decode, which is then prev
        prev = history[-1] if known else self._decode(self._ids + ids[:-1])
        n0 = len(self._ids)
        self._ids.extend(ids)
        text = self._decode(self._ids)
        stable = prev.rstrip("\ufffd")
        end = len(stable) if text.startswith(stable) else 0
        if len(prev) > end and text.startswith(need := prev[: end + 1]):
            # Rule 2 could emit more: it needs the decodes after each of the newest ids.
            if known:
                self._extend_history([text], contiguous=True)
            else:
                decodes, contiguous = self._batch_decodes(n0, m, prev, text, need)
                self._extend_history(decodes, contiguous=contiguous)
            if len(history) == _SETTLE + 1:
                # What every one of the last _SETTLE + 1 decodes agrees on is final, U+FFFDs included.
                end = max(end, min(_agreed(history), len(prev)))
        else:
            self._extend_history([text] if known else [prev, text], contiguous=known or m <= 2)
        if end <= self._done:
            return forced
        out = prev[self._done : end]
        self._last_start, self._last_source, self._last_ids = self._done, prev, len(self._ids) - 1
        self._done = end
        self._emitted_at = len(self._ids) - 1
        return forced + out

    def _batch_decodes(self, n0: int, m: int, prev: str, text: str, need: str) -> tuple[list[str], bool]:
        """The decodes after each of a batch's ``m`` ids (the window held ``n0`` before it) that rule 2 looks
        at, and whether they follow on from the history. Rule 2 emits only if all the last ``_SETTLE + 1``
        start with ``need``: the older decodes kept are checked first, then the batch's inner ones are decoded
        oldest first (at most ``_SETTLE - 1``), none past one that does not, so a batch streams a run as single
        ids do and a character cut at the batch's end costs a decode or none (issue 24)."""
        older = _SETTLE + 1 - m  # how many of the decodes rule 2 needs come before this batch
        if older > 0 and not all(h.startswith(need) for h in self._history[-older:]):
            return [prev, text], m <= 2
        inner: list[str] = []
        for j in range(max(1, m - _SETTLE), m - 1):
            inner.append(self._decode(self._ids[: n0 + j]))
            if not inner[-1].startswith(need):
                return [prev, text], m <= 2
        return [*inner, prev, text], older >= 0

    def _extend_history(self, decodes: list[str], *, contiguous: bool) -> None:
        """Append the decodes after each of the newest ids; without ``contiguous`` (ids between the old
        history and these were not decoded one by one) the history starts again from them."""
        history = self._history
        if not contiguous:
            history.clear()
        history += decodes
        del history[: -_SETTLE - 1]

    def _reanchor(self) -> str:
        # Keep the newest ids as context: their decode must end with the text not yet emitted, and from then
        # on the window's text beyond that point is taken to be what the whole stream's decode would add
        # (decoders are local: a few ids of context fix spacing and cleanup, as in vLLM's prefix offset).
        n = len(self._ids)
        text = self._history[-1] if self._history else self._decode(self._ids)
        pending = text[self._done :]
        since = n - min(self._emitted_at, n)  # ids fed since text was last emitted
        keeps = [*range(_WINDOW_KEEP, _WINDOW_KEEP + _CUT_TRIES), since + _WINDOW_KEEP]
        for keep in keeps:
            if keep >= n:
                continue  # it would keep the whole window
            tail = self._decode(self._ids[-keep:])
            if not tail.endswith(pending):
                continue
            emitted = tail[: len(tail) - len(pending)]
            # The recent decodes, moved to the new anchor: what they add to the emitted text stays theirs.
            moved = [emitted + h[self._done :] for h in self._history[:-1]]
            if emitted[-1:] == pending[:1] == "\ufffd" and not self._cut_agrees(keep, moved):
                continue
            del self._ids[:-keep]
            self._history = [*moved, tail]
            self._done = len(emitted)
            self._emitted_at = max(0, self._emitted_at - (n - keep))
            return ""
        if n < _WINDOW_HARD:
            return ""  # try again after the next token, from other cuts
        # Rule 4's last resort: emit what is pending as decoded so far, and start again from the newest ids.
        del self._ids[:-_WINDOW_KEEP]
        tail = self._decode(self._ids)
        self._done = len(tail)
        self._emitted_at = len(self._ids)
        self._history = [tail]
        return pending

    def _cut_agrees(self, keep: int, moved: list[str]) -> bool:
        """Whether the newest ``keep`` ids, less each of the newest few, decode to the recent decodes moved to
        the cut. A cut inside a ByteFallback run changes the run: kept from a lead byte, bytes that were U+FFFDs
        of an invalid run may form valid text, which shows within four ids (rule 2's reasoning). Decodes no longer
        than the emitted text are moved to it whole, and rule 2 cannot emit from them: they are not compared."""
        n = len(self._ids)
        return all(
            self._decode(self._ids[n - keep : n - back]) == moved[-back]
            for back, old in enumerate(reversed(self._history[:-1]), 1)
            if len(old) > self._done
        )

    @property
    def held_ids(self) -> int:
        """How many of the newest ids have text not emitted yet, as the recent decodes show: after the newest
        decode that the emitted text covers (``_SETTLE`` while a run of invalid bytes streams)."""
        for back, text in enumerate(reversed(self._history)):
            if len(text) <= self._done:
                return back
        return max(len(self._history), len(self._ids) - self._emitted_at)

    def finish(self) -> str:
        text = self._decode(self._ids)
        out = text[self._done :]
        self._last_start, self._last_source, self._last_ids = self._done, text, len(self._ids)
        self._done = len(text)
        self._forced = 0
        return out

    def ids_after(self, chars: int) -> int:
        """Of the ids fed so far, how many came after the first whose decode shows the first ``chars`` characters
        of the latest feed()/finish() text (a search over prefixes of the window: for a stop, once per reply)."""
        chars -= self._forced  # rule 4's text was emitted as of the newest ids: no earlier id is known
        if chars <= 0 or not self._last_source:
            return 0
        target = self._last_source[: self._last_start + chars]
        t = self._last_ids
        while t > 1 and self._decode(self._ids[: t - 1]).startswith(target):
            t -= 1
        return len(self._ids) - t
