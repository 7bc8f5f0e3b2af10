"""ReasoningSplitter: a reply's text deltas in, reasoning deltas and answer deltas out (issue 31 §1).

Sans-I/O and standard library only: the third hold-back, beside incomplete UTF-8 (the detokenizer) and stop
strings (``_stops.py``). A reasoning model writes its chain of thought between two tags; this reads the
formats real models emit (:data:`REASONING_FORMATS`, named as vLLM's ``--reasoning-parser``):

- ``<think>`` … ``</think>`` (DeepSeek-R1 and its distills, Qwen3, QwQ, SmolLM3, GLM-4.5, MiniMax-M2, Step3);
- ``[THINK]`` … ``[/THINK]`` (Magistral; special tokens in its Tekken vocabulary: decode with them kept).

Where a reply starts (:data:`ReplyStart`) is the one thing a format cannot say alone, because the chat
template may have written the opening tag already: DeepSeek-R1's and Qwen3-thinking's templates end the
prompt with ``<think>\\n``, so the reply holds only ``</think>``; with ``enable_thinking=False`` Qwen3's ends it
with ``<think>\\n\\n</think>\\n\\n``, so the reply is all answer. :func:`reply_start` reads that from the rendered
prompt; otherwise each format's default holds (``qwen3``, ``deepseek_r1``, …: inside reasoning, as vLLM's
parsers assume; ``glm45``, ``mistral``: reasoning only when the reply opens with the tag).

The rules (each has a test in ``tests/test_reasoning.py``):

1. Hold back only a real partial tag: a tail of the text that is a proper prefix of the tag awaited (at most
   ``len(tag) - 1`` characters), wherever it falls in a delta; everything else goes out in the ``feed`` that
   brings it. (SGLang holds a partial tag only when the whole buffer is one, so ``"abc</th"`` + ``"ink>"``
   misses it; vLLM needs the tag to be one vocabulary token. Here a tag is text, cut anywhere.)
2. The opening tag counts only at the very start of the reply (after whitespace): ``reasoning`` start drops
   it there (templates differ on whether the model writes it again), ``tag`` start enters reasoning with it.
   After the closing tag everything is answer: a second ``<think>`` there is answer text, and a ``<think>``
   inside reasoning is reasoning text.
3. Whitespace that opens the reasoning or the answer is markup (templates write ``<think>\\n`` and
   ``</think>\\n\\n``): it is dropped, never held. The tags themselves are never shown.
4. A boundary delta is split: one :class:`ReasoningDelta` then one :class:`ContentDelta`, never one event
   carrying both (clients that read ``if reasoning … else content`` drop the rest, vllm#43933).
5. A reply that ends inside reasoning (``max_tokens``, a client that leaves, a model that never closes the
   tag) ends as reasoning: a held partial tag is released as reasoning and :attr:`in_reasoning` stays true, so
   the caller reports the finish reason on the reasoning, never re-labelled as the answer.
6. Stop strings, ``response_format`` and the tool-call extractor act on the answer only: a ``<tool_call>``
   inside reasoning is reasoning text (the caller feeds only :class:`ContentDelta` text to them).

Cost: each character is looked at O(1) times: the held tail is at most ``len(tag) - 1`` characters, each
``feed`` searches only the held tail plus its own text once (``str.find``, in C), and the answer is passed on
without a look (``benchmarks/reasoning.py``).

Contract: for any split of the reply's text into deltas, the events joined (:func:`join_reasoning`) over the
``feed`` calls and ``finish`` are the same, and so is :attr:`in_reasoning` after ``finish``. ``finish()`` again
returns ``[]``; ``feed`` after it raises :class:`UseAfterFinishError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeAlias

from ._errors import UseAfterFinishError
from ._tool_call_events import ContentDelta

__all__ = [
    "REASONING_FORMATS",
    "ContentDelta",
    "ReasoningDelta",
    "ReasoningEvent",
    "ReasoningFormat",
    "ReasoningSplitter",
    "ReplyStart",
    "join_reasoning",
    "reasoning_format_for_template",
    "reply_start",
]

ReplyStart: TypeAlias = Literal["tag", "reasoning", "answer"]
"""Where a reply begins: ``"tag"``, in reasoning only if it opens with the opening tag; ``"reasoning"``, inside
reasoning (the template opened the tag; the reply may still repeat it); ``"answer"``, no reasoning at all (the
template opened and closed it: thinking disabled)."""


@dataclass(frozen=True)
class ReasoningFormat:
    """How one family of models marks its reasoning (see the module docstring)."""

    name: str  # vLLM's --reasoning-parser name
    opening: str
    closing: str
    start: ReplyStart = "tag"  # where a reply begins when the prompt does not say (reply_start)
    needs_specials: bool = False  # the tags are special tokens: decode with them kept
    markup_whitespace: bool = True  # whitespace after a tag is markup (rule 3); False keeps it as text


def _think(name: str, start: ReplyStart) -> ReasoningFormat:
    return ReasoningFormat(name, "<think>", "</think>", start=start)


REASONING_FORMATS = {
    f.name: f
    for f in (
        _think("deepseek_r1", "reasoning"),  # vLLM: no <think> in the reply means it began inside reasoning
        _think("qwen3", "reasoning"),  # Qwen3-thinking and Qwen3.5 templates open <think> in the prompt
        _think("glm45", "tag"),  # GLM-4.5: reasoning only when the reply writes <think>
        _think("minimax_m2", "reasoning"),
        _think("step3", "reasoning"),
        ReasoningFormat("mistral", "[THINK]", "[/THINK]", needs_specials=True),  # Magistral
    )
}
"""The formats by vLLM's ``--reasoning-parser`` name (``none``, no splitting, is the parser registry's)."""


def reasoning_format_for_template(template: str | None) -> ReasoningFormat | None:
    """The format a chat template teaches its model, from the tags it writes; ``None`` for a model that does
    not reason (SmolLM2's template). A ``<think>`` template is ``qwen3`` unless it is recognisably GLM's or
    DeepSeek's: ``qwen3`` starts inside reasoning and drops a repeated opening tag, so it reads both template
    styles (the prompt opens the tag, or the model does)."""
    if not template:
        return None
    if "[THINK]" in template:
        return REASONING_FORMATS["mistral"]
    if "</think>" not in template:
        return None
    if "[gMASK]" in template:
        return REASONING_FORMATS["glm45"]
    if "<｜Assistant｜>" in template:  # DeepSeek's full-width bars
        return REASONING_FORMATS["deepseek_r1"]
    return REASONING_FORMATS["qwen3"]


def reply_start(fmt: ReasoningFormat, prompt: str) -> ReplyStart:
    """Where the reply to ``prompt`` (the rendered chat template, generation prompt included) begins: after a
    closing tag, in the answer (thinking disabled: Qwen3's ``enable_thinking=False``, SmolLM3's
    ``/no_think``); after an opening tag, inside reasoning; otherwise where the format says."""
    tail = prompt.rstrip()
    if tail.endswith(fmt.closing):
        return "answer"
    if tail.endswith(fmt.opening):
        return "reasoning"
    return fmt.start


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """More of the reply's reasoning."""

    text: str


ReasoningEvent: TypeAlias = ReasoningDelta | ContentDelta
"""What the splitter says: reasoning, or answer text (:class:`ContentDelta`, the event the tool-call extractor
also writes for text that is not a call)."""


def join_reasoning(events: Iterable[ReasoningEvent]) -> list[ReasoningEvent]:
    """``events`` with adjacent deltas of one kind merged: the form in which the events of every split of a
    reply are equal."""
    out: list[ReasoningEvent] = []
    for e in events:
        _emit(out, type(e), e.text)
    return out


_WS = " \t\r\n"
_OPENING, _REASONING, _ANSWER = range(3)


class ReasoningSplitter:
    """Incremental reasoning splitter for one reply: ``feed(text) -> list[ReasoningEvent]``, then ``finish()``.

    ``start`` overrides the format's own (:func:`reply_start` reads it from the prompt). Joined outputs over
    any split of the input equal the one-shot result (the contract and the rules are in the module
    docstring)."""

    __slots__ = ("_finished", "_fmt", "_held", "_lead", "_start", "_state")

    def __init__(self, fmt: ReasoningFormat, *, start: ReplyStart | None = None) -> None:
        self._fmt = fmt
        self._start: ReplyStart = fmt.start if start is None else start
        if self._start not in ("tag", "reasoning", "answer"):
            raise ValueError(f"start must be 'tag', 'reasoning' or 'answer', not {self._start!r}")
        self._state = _ANSWER if self._start == "answer" else _OPENING
        self._held = ""  # a proper prefix of the tag awaited: the opening one, then the closing one
        self._lead = fmt.markup_whitespace  # at the start of a part (reasoning, answer): whitespace dropped
        self._finished = False

    @property
    def format(self) -> ReasoningFormat:
        return self._fmt

    @property
    def in_reasoning(self) -> bool:
        """Whether the text so far ends inside reasoning (after :meth:`finish`: the reply ended there, rule 5).
        Before the reply has shown which way it starts, the start decides."""
        return self._state == _REASONING or (self._state == _OPENING and self._start == "reasoning")

    @property
    def mid_reasoning(self) -> bool:
        """Whether the reply is inside reasoning with nothing held and no whitespace to drop: a delta that holds
        no closing tag and ends with no character able to begin one is then all reasoning, and feeding it would
        change nothing (what ``feed``'s own fast path checks; a caller may keep this between its feeds)."""
        return self._state == _REASONING and not self._lead and not self._held

    @property
    def answering(self) -> bool:
        """Whether every later ``feed`` passes its text on whole as answer (the reasoning is over, nothing is
        held and the answer has begun): a caller may then skip the splitter."""
        return self._state == _ANSWER and not self._lead and not self._held

    @property
    def held(self) -> str:
        """The partial tag held back (for inspection and tests): never longer than the tag less one."""
        return self._held

    def feed(self, text: str) -> list[ReasoningEvent]:
        """The events the next piece of the reply's text causes."""
        if self._finished:
            raise UseAfterFinishError("ReasoningSplitter.feed() called after finish()")
        if not self._lead and not self._held and text:
            # The common deltas, in one or two C-level searches and one event: the middle of the answer, and
            # the middle of the reasoning when the delta holds no '<' that could begin the closing tag.
            if self._state == _ANSWER:
                return [ContentDelta(text)]
            closing = self._fmt.closing
            if self._state == _REASONING and text.find(closing[0], -len(closing)) < 0 and closing not in text:
                return [ReasoningDelta(text)]
        out: list[ReasoningEvent] = []
        i, n = 0, len(text)
        while i < n:
            if self._lead and not self._held:
                while i < n and text[i] in _WS:  # rule 3 (and the reply's own leading whitespace)
                    i += 1
                if i == n:
                    break
                if self._state != _OPENING:
                    self._lead = False
            state = self._state
            if state == _ANSWER:
                _emit(out, ContentDelta, text[i:])
                break
            i = self._opening(text, i, out) if state == _OPENING else self._reasoning(text, i, out)
        return out

    def _opening(self, text: str, i: int, out: list[ReasoningEvent]) -> int:
        """At the reply's start: does it open with the opening tag (rule 2)?"""
        opening, held = self._fmt.opening, self._held
        need = opening[len(held) :]
        chunk = text[i : i + len(need)]
        if need.startswith(chunk):
            if len(chunk) < len(need):  # the text ends inside the tag
                self._held = held + chunk
                return len(text)
            self._held = ""
            self._state = _REASONING
            self._lead = self._fmt.markup_whitespace
            return i + len(need)
        # Not the tag: what was held is the first text of the reasoning (read again there: ``</`` begins the
        # closing tag too; no closing tag fits in a partial opening one) or of the answer.
        self._lead = False
        if self._start == "reasoning":
            self._state = _REASONING
            return i
        self._held = ""
        self._state = _ANSWER
        if held:
            _emit(out, ContentDelta, held)
        return i

    def _reasoning(self, text: str, i: int, out: list[ReasoningEvent]) -> int:
        """Inside reasoning: everything up to the closing tag, less a real partial one at the end (rule 1)."""
        closing, held = self._fmt.closing, self._held
        buf = held + text[i:] if held else text[i:] if i else text
        found = buf.find(closing)
        if found >= 0:
            if found:
                _emit(out, ReasoningDelta, buf[:found])
            self._held = ""
            self._state = _ANSWER
            self._lead = self._fmt.markup_whitespace
            return i + found + len(closing) - len(held)
        keep = _partial_tail(buf, closing)
        if keep < len(buf):
            _emit(out, ReasoningDelta, buf[: len(buf) - keep] if keep else buf)
        self._held = buf[len(buf) - keep :] if keep else ""
        return len(text)

    def finish(self) -> list[ReasoningEvent]:
        """The reply is over: a held partial tag is text after all, of the part it was in (rule 5)."""
        if self._finished:
            return []
        self._finished = True
        held, self._held = self._held, ""
        if self._state == _OPENING:
            self._state = _REASONING if self._start == "reasoning" else _ANSWER
        out: list[ReasoningEvent] = []
        if held:
            _emit(out, ReasoningDelta if self._state == _REASONING else ContentDelta, held)
        return out


def _emit(out: list[ReasoningEvent], kind: type[ReasoningDelta] | type[ContentDelta], text: str) -> None:
    """Append ``text`` as a ``kind`` event, merged into the last one when it is of that kind: one event per
    kind per ``feed``, one frame."""
    last = out[-1] if out else None
    if type(last) is kind and last is not None:
        out[-1] = kind(last.text + text)
    else:
        out.append(kind(text))


def _partial_tail(buf: str, tag: str) -> int:
    """The length of the longest tail of ``buf`` that is a proper prefix of ``tag`` (0: none). Only the last
    ``len(tag) - 1`` characters are looked at, from each occurrence of the tag's first character there: O(1)
    per call whatever the length of ``buf``."""
    first, n = tag[0], len(buf)
    k = buf.find(first, max(0, n - len(tag) + 1))
    while k >= 0:
        if tag.startswith(buf[k:]):
            return n - k
        k = buf.find(first, k + 1)
    return 0
