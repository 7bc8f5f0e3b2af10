"""One rule for every incremental object after its end (``tokenrelay._errors``, ARCHITECTURE.md).

The end method (``finish()``, ``close()``, ``flush()``) may be called again and adds nothing; input after it
raises ``UseAfterFinishError``, a ``RuntimeError`` and a ``TokenRelayError``. An object that ends the stream by
itself first (a stop string, ``TextStream``'s ``Finished``) drops what follows instead, as the split contract
needs. One table, one test: a new incremental object gets a row here.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from conftest import ChunkTokenizer
from tiny_tokenizers import toy_wordpiece
from tokenrelay import (
    ChatChunkWriter,
    Detokenizer,
    PartialJSON,
    ReasoningSplitter,
    SSEParser,
    StopMatcher,
    TextChunkWriter,
    TextStream,
    TokenRelayError,
    ToolCallExtractor,
    Usage,
    UseAfterFinishError,
    load_tokenizer,
)
from tokenrelay._reasoning import REASONING_FORMATS
from tokenrelay._tool_calls import FORMATS
from tokenrelay.doctor._recording import ContentDecoder

CHUNKS = ChunkTokenizer([b"a", b"b", "☕".encode()[:2], "☕".encode()[2:]])


@dataclass
class Case:
    """``make()`` builds the object; ``feed`` gives it input; ``end`` is its end method, ``empty`` what the end
    method returns when called again; ``after_end`` are the other calls that must raise after it, and ``allowed``
    those that must not (the usage chunk follows the finish chunk); ``ends_itself`` ends the stream from input."""

    make: Callable[[], Any]
    feed: Callable[[Any], object]
    end: Callable[[Any], object]
    empty: object
    after_end: tuple[Callable[[Any], object], ...] = ()
    allowed: tuple[Callable[[Any], object], ...] = ()
    ends_itself: Callable[[Any], object] | None = None
    dropped: object = None  # what ``feed`` returns once the object ended itself


def _wordpiece() -> Detokenizer:
    return Detokenizer(load_tokenizer(toy_wordpiece()))  # no byte table: the window fallback


def _text_stream() -> TextStream:
    return TextStream(CHUNKS, stops=["ab"])


CASES = {
    "Detokenizer": Case(
        make=lambda: Detokenizer(CHUNKS),
        feed=lambda d: d.feed([0, 2]),
        end=lambda d: d.finish(),
        empty="",
        after_end=(lambda d: d.feed(1), lambda d: d.feed([1, 0]), lambda d: d.feed_piece(0)),
    ),
    "Detokenizer (window)": Case(
        make=_wordpiece, feed=lambda d: d.feed([5, 6]), end=lambda d: d.finish(), empty=""
    ),
    "StopMatcher": Case(
        make=lambda: StopMatcher(["</s>"]),
        feed=lambda m: m.feed("a </"),
        end=lambda m: m.finish(),
        empty="",
        ends_itself=lambda m: m.feed("x</s>y"),
        dropped="",
    ),
    "TextStream": Case(
        make=_text_stream,
        feed=lambda s: s.feed([0]),
        end=lambda s: s.finish(),
        empty=[],
        after_end=(lambda s: s.feed_text("x"),),
        ends_itself=lambda s: s.feed([0, 1]),
        dropped=[],
    ),
    "SSEParser": Case(
        make=SSEParser,
        feed=lambda p: p.feed(b"data: a\n\nda"),
        end=lambda p: p.close(),
        empty=[],
        after_end=(lambda p: list(p.iter_events([b"\n\n"])),),
    ),
    "ChatChunkWriter": Case(
        make=lambda: ChatChunkWriter(id="chatcmpl-1", model="m", created=1),
        feed=lambda w: w.delta("a"),
        end=lambda w: w.finish("stop"),
        empty=b"",
        after_end=(lambda w: w.role(), lambda w: w.delta_with_ids("a", [1])),
        allowed=(lambda w: w.usage(Usage(1, 2)),),
    ),
    "TextChunkWriter": Case(
        make=lambda: TextChunkWriter(id="cmpl-1", model="m", created=1),
        feed=lambda w: w.delta("a"),
        end=lambda w: w.finish("length"),
        empty=b"",
        after_end=(lambda w: w.delta_with_ids("a", [1]),),
        allowed=(lambda w: w.usage(Usage(1, 2)),),
    ),
    "PartialJSON": Case(
        make=PartialJSON,
        feed=lambda p: p.feed('{"a": [1, "b"]}'),
        end=lambda p: p.finish(),
        empty={"a": [1, "b"]},  # finish() again returns the same final value
    ),
    "ToolCallExtractor": Case(
        make=lambda: ToolCallExtractor(FORMATS["hermes"], parallel=False),
        feed=lambda x: x.feed("Hi <tool_"),
        end=lambda x: x.finish(),
        empty=[],
        # parallel=False: the first complete call ends the extraction; what follows is dropped
        ends_itself=lambda x: x.feed('<tool_call>{"name": "f", "arguments": {}}</tool_call>'),
        dropped=[],
    ),
    "ReasoningSplitter": Case(
        make=lambda: ReasoningSplitter(REASONING_FORMATS["qwen3"]),
        feed=lambda x: x.feed("thinking </thi"),
        end=lambda x: x.finish(),
        empty=[],
    ),
    "ContentDecoder": Case(
        make=lambda: ContentDecoder("gzip"),
        feed=lambda d: d.feed(gzip.compress(b"hello")[:9]),
        end=lambda d: d.flush(),
        empty=b"",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_input_after_the_end_raises_and_the_end_is_idempotent(name: str) -> None:
    case = CASES[name]
    obj = case.make()
    case.feed(obj)
    case.end(obj)
    assert case.end(obj) == case.empty  # the end method again: nothing new
    for call in (case.feed, *case.after_end):
        with pytest.raises(UseAfterFinishError) as raised:
            call(obj)
        assert isinstance(raised.value, RuntimeError) and isinstance(raised.value, TokenRelayError)
    assert case.end(obj) == case.empty  # a refused call changed nothing
    for call in case.allowed:
        assert call(obj)

    if case.ends_itself is None:
        return
    obj = case.make()
    case.ends_itself(obj)
    assert case.feed(obj) == case.dropped  # ended by its input: more input is dropped, not an error
    case.end(obj)
    with pytest.raises(UseAfterFinishError):
        case.feed(obj)


def test_every_public_incremental_object_has_a_row() -> None:
    import tokenrelay

    incremental = {
        name
        for name in tokenrelay.__all__
        if isinstance(cls := getattr(tokenrelay, name), type)
        and any(hasattr(cls, end) for end in ("finish", "close", "flush"))
    }
    assert incremental <= {name.split(" ")[0] for name in CASES}
