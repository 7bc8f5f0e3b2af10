"""Token ids → text deltas, exactly as the tokenizer's own decode would have it, at O(1) per token.

The first hop of the relay. A model emits token ids; a client must see text. Three things go wrong in naive
streaming decoders, and this module is built around them:

* A character may be split across tokens (byte-level BPE, byte-fallback ``<0xE2>`` tokens). Decoding one token at
  a time shows U+FFFD where the reference decode shows ``☕``. We keep an incremental UTF-8 decoder over the
  tokens' bytes, so at most one incomplete character (≤ 3 bytes) is ever held back.
* Decoding single tokens loses context the decoder needs (SentencePiece's leading space is dropped only on the
  first piece: "The chai" decodes as ``The`` + `` ch`` + ``ai``). The byte table records those first-token rules.
* Some decoders are not monotonic: HF ``ByteFallback`` turns a *whole* run of byte tokens into U+FFFDs if any of
  it is invalid (vllm#17448), so text shown early could be contradicted later. We hold such a run back until it
  ends instead of emitting and regretting; once the run is invalid whatever follows, every byte of it is a
  U+FFFD for good, and it streams at once.

Two paths, chosen automatically:

* **Byte table** (fast path): ``tokenizer.byte_table()`` gives each token's bytes plus the family's rules; the
  table was verified against the reference decode when the tokenizer was loaded, and ``_byte_table.py``
  compiles it once into per-id actions. In the steady state a token whose bytes are a complete UTF-8 string
  costs one list lookup.
* **Window** (fallback, ``_window.py``): for decoders that are not byte-representable (WordPiece, cleanup
  rules), a bounded window of ids is re-decoded each step and only text that further tokens did not change is
  emitted.

Which id completed a piece of text (``ids_after``): the text a call returns may have been final before the
newest id arrived (a ByteFallback run is shown when it ends, the window one token late). ``TextStream`` asks, so
that a stop string is charged to the id that completed it, not to the ids that revealed it.

Contract: for any ids and any way of cutting them into ``feed`` calls, ``"".join(feeds) + finish()`` equals
``tokenizer.decode(all_ids)``; with ``prompt_ids`` it equals ``decode(prompt + ids)[len(decode(prompt)):]``.
This module is sans-I/O: standard library only. It is a little over 400 lines because it is one class whose
hot path (``feed``) and by-the-book path (``_feed_slow``, ByteFallback runs) must keep the same state; the
compiled table they read is ``_byte_table.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ._byte_table import (
    BYTE,
    FLUSH,
    PER_BYTE_ERRORS,
    SKIP,
    SPECIAL,
    TEXT,
    UTF8_BAD,
    UTF8_STEP,
    Utf8Decoder,
    compile_table,
    utf8_decode,
)
from ._errors import TokenizerError, UseAfterFinishError
from ._protocols import ByteTable, Tokenizer
from ._window import WindowDecoder

__all__ = ["DetokenizedPiece", "Detokenizer", "StrandedBytes", "decode_with_table"]

#: What ``finish()`` does with bytes of a character that never completed: ``"replace"`` them with U+FFFD as the
#: reference decode does, or ``"discard"`` them (then the output differs from the reference by those U+FFFDs).
StrandedBytes = Literal["replace", "discard"]


@dataclass(frozen=True, slots=True)
class DetokenizedPiece:
    """Text that became final, and the token ids fed since the previous non-empty piece that produced it."""

    text: str
    token_ids: tuple[int, ...]


class Detokenizer:
    """Incremental detokenizer: ``feed(ids) -> str`` of newly final text, ``finish() -> str`` at the end.

    Joined outputs over any split of the ids equal the one-shot ``tokenizer.decode``; text once returned is never
    contradicted. ``stranded="replace"`` (default) turns bytes of an unfinished character into U+FFFD at
    ``finish()``, exactly like the reference decode; ``stranded="discard"`` drops them instead. ``finish()`` may
    be called again (it returns ``""``); ``feed`` after it raises :class:`UseAfterFinishError`.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        skip_special_tokens: bool = True,
        prompt_ids: Sequence[int] | None = None,
        stranded: StrandedBytes = "replace",
    ) -> None:
        if stranded not in ("replace", "discard"):
            raise ValueError(f"stranded must be 'replace' or 'discard', not {stranded!r}")
        self._stranded = stranded
        self._finished = False
        self._unattributed: list[int] = []
        table = tokenizer.byte_table()
        self._window = None if table is not None else WindowDecoder(tokenizer, skip_special_tokens)
        self.uses_byte_table = table is not None
        if table is None:
            table = ByteTable(pieces=())
        self._setup_table(table, skip_special_tokens)
        if prompt_ids:
            prompt = list(prompt_ids)
            skip = len(tokenizer.decode(prompt, skip_special_tokens=skip_special_tokens))
            if self._window is not None:
                self._window.prime(prompt)
            else:
                # The prompt's own text is dropped character by character, so a prompt ending inside a
                # character never leaks (vllm#48853): output = decode(prompt + ids)[len(decode(prompt)):].
                self._skip_chars = skip
                self._feed_slow(prompt)
        self._update_state()

    @property
    def stranded(self) -> StrandedBytes:
        """What ``finish()`` will do with stranded bytes; may be changed until then (a relay learns it from its
        upstream's own text as the reply goes)."""
        return self._stranded

    @stranded.setter
    def stranded(self, policy: StrandedBytes) -> None:
        if policy not in ("replace", "discard"):
            raise ValueError(f"stranded must be 'replace' or 'discard', not {policy!r}")
        self._stranded = policy

    # -- set-up ------------------------------------------------------------------------------------------

    def _setup_table(self, table: ByteTable, skip: bool) -> None:
        compiled = compile_table(table, skip)
        self._kinds = compiled.kinds
        self._whole = compiled.whole
        self._split = compiled.split
        self._plain_bytes = compiled.plain
        self._plain_get = compiled.plain_by_id.__getitem__
        self._n = len(compiled.kinds)
        self._pieces = table.pieces
        self._policy = table.invalid_utf8
        self._leading = table.leading_space
        self._specials_flush = table.specials_flush
        self._restarts = table.kept_special_restarts
        self._errors = PER_BYTE_ERRORS if table.invalid_utf8 == "per_byte" else "replace"
        self._pend = b""  # bytes of an unfinished character
        self._run = bytearray()  # pending byte-fallback run ("byte_run" policy)
        self._run_owner: list[int] = []  # per byte of the run: the index (in ids fed) of the id it came from
        self._run_state = 0  # the run's state in UTF8_STEP: 0 = complete text so far
        self._run_bad = False  # the run is invalid whatever follows: each byte is shown as U+FFFD at once
        self._fed = 0  # ids through the slow path (all of them under "byte_run"): the owner numbering
        # Held text the latest call released ("byte_run"): (its start in that call's text, owner per character)
        self._marks: list[tuple[int, list[int]]] = []
        self._bos = table.leading_space != "keep"
        self._skip_chars = 0

    # -- the public API ----------------------------------------------------------------------------------

    def feed(self, ids: int | Iterable[int]) -> str:
        """Take one token id or an iterable of them; return the text that is now final (maybe "")."""
        # Hot path. _plain: only the incremental UTF-8 decoder is in play (no first-token rule, prompt to skip
        # or byte-fallback run), so a token's bytes go straight into it; with nothing pending, a token whose
        # bytes are complete UTF-8 is its own text.
        if type(ids) is int:
            if 0 <= ids < self._plain_n:  # _plain_n is 0 unless _plain: one check for both
                pend = self._pend
                if not pend:
                    text = self._whole[ids]
                    if text is not None:
                        return text
                    split = self._split[ids]
                    if split is not None:
                        self._pend = split[1]
                        return split[0]
                else:
                    data = self._plain_bytes[ids]
                    if data is not None:
                        data = pend + data
                        text, used = utf8_decode(data, self._errors, False)
                        self._pend = data[used:]
                        return text
            return self._feed_any(ids)
        if type(ids) is not list and type(ids) is not tuple:
            # An iterator must be read once: the fallback below would find it consumed. (An int returned above.)
            ids = list(ids)  # type: ignore[arg-type]
        if self._plain:
            try:
                # A dict, not the list: a negative or unknown id must raise, not index from the end.
                data = b"".join(map(self._plain_get, ids))
            except (KeyError, TypeError):
                pass
            else:
                if self._pend:
                    data = self._pend + data
                text, used = utf8_decode(data, self._errors, False)
                self._pend = data[used:]
                return text
        # A byte-fallback run, a special with rules, a first-token rule, an empty or invalid batch: by the book.
        return self._feed_any(ids)

    def finish(self) -> str:
        """Return what is still held back; the stream is over. Stranded bytes follow ``stranded``."""
        if self._finished:
            return ""
        self._finished = True
        if self._window is not None:
            return self._window.finish()
        out: list[str] = []
        if self._marks:
            self._marks.clear()
        self._flush_into(out, final=True)
        return "".join(out)

    def ids_after(self, chars: int) -> int:
        """How many of the ids fed so far came after the one that completed the first ``chars`` characters of
        the text the latest ``feed`` or ``finish`` returned: "completed" as the reference decode of the ids up
        to that one shows those characters. 0 unless text was held past the id that completed it (a
        ByteFallback run, the window fallback). Exact when ids are fed one at a time, as ``TextStream`` does;
        within a batch, text that was not held counts as completed by the batch's last id.
        """
        if self._window is not None:
            return self._window.ids_after(chars)
        for start, owners in self._marks:
            if start < chars <= start + len(owners):
                return self._fed - 1 - owners[chars - start - 1]
        return 0

    def feed_piece(self, ids: int | Iterable[int]) -> DetokenizedPiece:
        """Like :meth:`feed`, and report which ids produced the text (all ids since the last non-empty piece)."""
        batch = (ids,) if isinstance(ids, int) else tuple(ids)
        text = self.feed(batch)
        self._unattributed.extend(batch)
        return self._piece(text)

    def finish_piece(self) -> DetokenizedPiece:
        """Like :meth:`finish`, with the ids whose text had not been reported yet."""
        piece = self._piece(self.finish())
        if not piece.text and self._unattributed:
            piece = DetokenizedPiece("", tuple(self._unattributed))
            self._unattributed.clear()
        return piece

    @property
    def held_bytes(self) -> int:
        """How many bytes of an unfinished character (or byte-fallback run) are held back right now. On the
        window path, where a token's bytes are not known, how many of the newest ids have text not shown yet
        (a byte-fallback token is one byte; text tokens are held one token, rule 1 of ``_window.py``)."""
        if self._window is not None:
            return self._window.held_ids
        return len(self._pend) + len(self._run)

    # -- internals ---------------------------------------------------------------------------------------

    def _piece(self, text: str) -> DetokenizedPiece:
        if not text:
            return DetokenizedPiece("", ())
        ids = tuple(self._unattributed)
        self._unattributed.clear()
        return DetokenizedPiece(text, ids)

    def _feed_any(self, ids: int | Iterable[int]) -> str:
        if self._finished:
            raise UseAfterFinishError("Detokenizer.feed() called after finish()")
        batch: Iterable[int] = (ids,) if isinstance(ids, int) else ids
        if self._window is not None:
            return self._window.feed(list(batch))
        text = self._feed_slow(batch)
        self._update_state()
        return text

    def _update_state(self) -> None:
        self._plain = self._policy != "byte_run" and not (
            self._window is not None or self._finished or self._bos or self._skip_chars
        )
        self._plain_n = self._n if self._plain else 0

    def _feed_slow(self, ids: Iterable[int]) -> str:
        out: list[str] = []
        kinds, pieces, n = self._kinds, self._pieces, self._n
        if self._marks:
            self._marks.clear()
        fed = self._fed - 1  # index of the id in hand, counting every id fed (owners of held bytes)
        try:
            for i in ids:
                if type(i) is not int and not isinstance(i, int):
                    raise TypeError(f"token ids must be int, not {type(i).__name__}")
                if not 0 <= i < n:
                    raise TokenizerError(f"token id {i} is outside the vocabulary (0..{n - 1})")
                fed += 1
                kind = kinds[i]
                strip = self._bos and self._leading == "first_token"
                if strip:
                    # llama.cpp's llama_detokenize strips one space from token 0, even one it renders as nothing.
                    self._bos = False
                if kind == SKIP:
                    continue
                if kind in (FLUSH, SPECIAL):
                    if self._specials_flush:
                        self._flush_into(out, final=False)
                    if kind == FLUSH:
                        continue
                data = bytes(pieces[i])
                if strip and data[:1] == b" ":
                    data = data[1:]
                if self._bos and self._leading == "first_piece" and kind != SPECIAL:
                    # SentencePiece drops the dummy-prefix space of the first ordinary piece of a segment only.
                    if kind == TEXT and data.startswith(b" "):
                        data = data[1:]
                    self._bos = False
                if self._policy == "byte_run":
                    if kind == BYTE:
                        if self._run_bad:
                            # The run is invalid whatever follows: HF ByteFallback shows all of it as U+FFFDs.
                            self._emit(out, "\ufffd" * len(data))
                            continue
                        self._run += data
                        if len(data) == 1:
                            self._run_owner.append(fed)
                            state = UTF8_STEP[self._run_state][data[0]]
                        else:
                            self._run_owner += [fed] * len(data)
                            state = self._run_state
                            for byte in data:
                                state = UTF8_STEP[state][byte]
                        self._run_state = state
                        if state == UTF8_BAD:  # no continuation can make the run valid now
                            self._run_bad = True
                            self._end_run(out)
                        continue
                    if self._run or self._run_bad:
                        self._end_run(out)
                    self._emit(out, data.decode("utf-8", "replace"))
                else:
                    data = self._pend + data
                    text, used = utf8_decode(data, self._errors, False)
                    self._pend = data[used:]
                    self._emit(out, text)
                if kind == SPECIAL and self._restarts:
                    self._bos = self._leading != "keep"
        finally:
            self._fed = fed + 1
        return "".join(out)

    def _emit(self, out: list[str], text: str) -> None:
        if not text:
            return
        if self._bos and self._leading == "first_char":
            # HF's Strip decoder removes one space from the start of the whole fused output.
            if text[0] == " ":
                text = text[1:]
            self._bos = False
        if self._skip_chars:
            cut = min(self._skip_chars, len(text))
            self._skip_chars -= cut
            text = text[cut:]
        if text:
            out.append(text)

    def _emit_owned(self, out: list[str], text: str, owners: list[int]) -> None:
        """``_emit`` for held text: ``owners[k]`` is the index of the id that completed character ``k``."""
        pieces = len(out)
        self._emit(out, text)
        if len(out) > pieces:
            shown = out[-1]
            start = sum(map(len, out[:-1]))
            self._marks.append((start, owners[len(text) - len(shown) :]))

    def _end_run(self, out: list[str], *, discard_tail: bool = False) -> None:
        if not self._run:
            self._run_bad = False
            return
        run = bytes(self._run)
        owner = self._run_owner
        self._run.clear()
        self._run_owner, self._run_state = [], 0
        if discard_tail and not self._run_bad:
            probe = Utf8Decoder("replace")
            probe.decode(run)
            run = run[: len(run) - len(probe.getstate()[0])]
        # Which id completed each character, as the reference decode of the ids up to it shows it: a valid run's
        # characters appear as their last bytes arrive, and an incomplete or invalid prefix of a run shows as
        # one U+FFFD per byte.
        try:
            text = run.decode("utf-8")
        except UnicodeDecodeError:
            # HF ByteFallback: an invalid run becomes one U+FFFD per byte token, valid parts included. The k-th
            # U+FFFD shows from the first prefix, at or after byte k, that is not complete text.
            text = "\ufffd" * len(run)
            owners = [0] * len(run)
            probe = Utf8Decoder("strict")
            whole = []
            for k in range(len(run)):
                try:
                    probe.decode(run[k : k + 1])
                except UnicodeDecodeError:
                    whole += [False] * (len(run) - k)
                    break
                whole.append(not probe.getstate()[0])
            at = len(run) - 1
            for k in range(len(run) - 1, -1, -1):
                if not whole[k]:
                    at = k
                owners[k] = owner[at]
        else:
            owners = []
            end = 0
            for char in text:
                end += len(char.encode())
                owners.append(owner[end - 1])
        self._emit_owned(out, text, owners)

    def _flush_into(self, out: list[str], *, final: bool) -> None:
        discard = final and self._stranded == "discard"
        if self._policy == "byte_run":
            self._end_run(out, discard_tail=discard)
            self._run_bad = False
        elif discard:
            self._pend = b""
        else:
            pend, self._pend = self._pend, b""
            self._emit(out, utf8_decode(pend, self._errors, True)[0])
        if final:
            self._update_state()


def decode_with_table(table: ByteTable, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
    """One-shot decode through a byte table (what the fast path computes), used to verify a table."""

    class _TableOnly:
        name = "table"
        vocab_size = len(table.pieces)
        eos_token_ids: frozenset[int] = frozenset()

        def encode(self, text: str) -> list[int]:
            raise NotImplementedError

        def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
            raise NotImplementedError

        def byte_table(self) -> ByteTable:
            return table

    detok = Detokenizer(_TableOnly(), skip_special_tokens=skip_special_tokens)
    return detok.feed(ids) + detok.finish()
