"""Reply events written as OpenAI Chat Completions (and legacy text completions): a stream's frames or a body.

:class:`ChatReplyWriter` and :class:`CompletionReplyWriter` are the ``_reply.ReplyWriter`` of the two OpenAI
endpoints, over the chunk shapes of ``_chat``. Event by event (``_reply`` gives the order):

- ``start()``: the role chunk (chat; ``prompt_token_ids`` on it with ``return_token_ids``), nothing for text
  completions;
- ``TextDelta``: a ``delta.content`` chunk; ``ReasoningDelta``: a ``delta.reasoning_content`` chunk;
  ``CallStarted`` / ``CallArguments``: ``delta.tool_calls`` chunks (id and name first, then argument fragments);
  ``CallEnded``: nothing;
- ``ReplyEnded``: the finish chunk (``stop``, ``length``, ``tool_calls``), the usage chunk with
  ``stream_options.include_usage``, and ``data: [DONE]``;
- ``ReplyFailed``: an error frame and ``data: [DONE]`` (as vLLM's server ends a failed stream: a client that
  reads to the end marker ends there too, and the error stays the last data it acts on).

``return_token_ids``: every chunk written from an event carries that event's ids. ``origin`` (the request's
start, on the clock ``sent`` is read from) turns on ``include_step_times``: each frame gets the ``tokenrelay``
field (``_chat.timed_frame``) with the event's step times. The joined ``content`` of the frames is the joined
text of the events, and a body says the same as the stream for the same events.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tokenrelay._errors import TokenRelayError
from tokenrelay._reply import (
    CallArguments,
    CallEnded,
    CallStarted,
    ReasoningDelta,
    Reply,
    ReplyEnded,
    ReplyEvent,
    ReplyFailed,
)
from tokenrelay._stream import TextDelta

from ._chat import (
    DONE,
    ChatChunkWriter,
    TextChunkWriter,
    chat_completion,
    error_event,
    json_bytes,
    text_completion,
    timed_frame,
)
from ._sse import KEEPALIVE

__all__ = ["ChatReplyWriter", "CompletionReplyWriter", "openai_error_body"]


def openai_error_body(error: TokenRelayError) -> tuple[int, bytes]:
    """An error response in OpenAI's shape: its status and ASCII JSON body (a message may quote the client's
    input, and that must not fail on a lone surrogate in it)."""
    return error.status_code, json.dumps(error.to_openai(), separators=(",", ":")).encode()


class _OpenAIReplyWriter:
    """What the two OpenAI writers share: the chunk writer, ``return_token_ids``, step-time stamps, the end
    (finish chunk, usage, ``[DONE]``), an error, and a body's token ids."""

    keepalive = KEEPALIVE

    __slots__ = ("_chunks", "_created", "_id", "_ids", "_model", "_origin", "_prompt_ids", "_usage")

    _chunks: ChatChunkWriter | TextChunkWriter

    def __init__(
        self,
        *,
        id: str,
        model: str,
        created: int,
        include_usage: bool = False,
        prompt_ids: Sequence[int] | None = None,
        origin: float | None = None,
    ) -> None:
        """``prompt_ids``: given when the client asked for ``return_token_ids`` (every chunk then carries
        ids, the first one the prompt's)."""
        self._id, self._model, self._created = id, model, created
        self._usage = include_usage
        self._prompt_ids = prompt_ids
        self._ids = prompt_ids is not None
        self._origin = origin

    def _stamp(self, frame: bytes, sent: float | None, steps: object) -> bytes:
        if self._origin is None or sent is None:
            return frame
        return timed_frame(frame, origin=self._origin, sent=sent, steps=steps)  # type: ignore[arg-type]

    def _text(self, event: TextDelta, sent: float | None) -> Sequence[bytes]:
        chunks = self._chunks
        frame = chunks.delta_with_ids(event.text, event.token_ids) if self._ids else chunks.delta(event.text)
        return (self._stamp(frame, sent, event.steps),)

    def _end(self, event: ReplyEvent, sent: float | None) -> Sequence[bytes]:
        """The frames of ``ReplyEnded`` or ``ReplyFailed``: the last of the stream."""
        if type(event) is ReplyFailed:
            return (error_event(event.error), DONE)
        assert isinstance(event, ReplyEnded)
        chunks = self._chunks
        finish = self._stamp(
            chunks.finish(event.reason, event.token_ids if self._ids else None), sent, event.steps
        )
        if self._usage:
            usage = chunks.usage(event.usage, event.reasoning_tokens)
            return (finish, self._stamp(usage, sent, None), DONE)
        return (finish, DONE)

    def _with_ids(self, body: dict[str, object], reply: Reply) -> bytes:
        """``body`` with vLLM's token-id fields when asked for (the prompt's at the top, the reply's in the
        choice), as bytes."""
        if self._prompt_ids is not None:
            body["prompt_token_ids"] = list(self._prompt_ids)
            choices = body["choices"]
            assert isinstance(choices, list)
            choices[0]["token_ids"] = reply.token_ids
        return json_bytes(body)

    error_body = staticmethod(openai_error_body)


class ChatReplyWriter(_OpenAIReplyWriter):
    """One ``chat.completion`` reply as a stream (``start``/``write``) or a body (``body``)."""

    __slots__ = ()

    def __init__(self, **fields: Any) -> None:
        super().__init__(**fields)
        self._chunks = ChatChunkWriter(
            id=self._id, model=self._model, created=self._created, include_usage=self._usage
        )

    def start(self, sent: float | None = None) -> Sequence[bytes]:
        chunks = self._chunks
        assert isinstance(chunks, ChatChunkWriter)
        if self._prompt_ids is not None:
            chunks.prompt_token_ids(self._prompt_ids)
        return (self._stamp(chunks.role(), sent, None),)

    def write(self, event: ReplyEvent, sent: float | None = None) -> Sequence[bytes]:
        chunks, t = self._chunks, type(event)
        assert isinstance(chunks, ChatChunkWriter)
        if t is TextDelta:
            return self._text(event, sent)  # type: ignore[arg-type]
        if (
            t is ReasoningDelta
        ):  # (no isinstance assert: once per reasoning token, and the type was just read)
            frame = chunks.reasoning(event.text, event.token_ids if self._ids else None)  # type: ignore[union-attr]
        elif t is CallStarted:
            assert isinstance(event, CallStarted)
            frame = chunks.tool_call(
                event.index, event.id, event.name, event.token_ids if self._ids else None
            )
        elif t is CallArguments:
            assert isinstance(event, CallArguments)
            frame = chunks.tool_arguments(event.index, event.text, event.token_ids if self._ids else None)
        elif t is CallEnded:
            return ()
        else:
            return self._end(event, sent)
        return (self._stamp(frame, sent, event.steps),)  # type: ignore[union-attr]  # (a delta or a call)

    def body(self, reply: Reply) -> bytes:
        end = reply.end
        body = chat_completion(
            id=self._id,
            model=self._model,
            created=self._created,
            content=reply.text,
            finish_reason=end.reason,
            usage=end.usage,
            tool_calls=[(c.id, c.name, c.arguments) for c in reply.calls],
            reasoning=reply.reasoning or None,
            reasoning_tokens=end.reasoning_tokens,
        )
        return self._with_ids(body, reply)


class CompletionReplyWriter(_OpenAIReplyWriter):
    """One legacy ``text_completion`` reply (``/v1/completions``: text only, no calls, no reasoning)."""

    __slots__ = ()

    def __init__(self, **fields: Any) -> None:
        super().__init__(**fields)
        self._chunks = TextChunkWriter(
            id=self._id, model=self._model, created=self._created, include_usage=self._usage
        )

    def start(self, sent: float | None = None) -> Sequence[bytes]:
        if self._prompt_ids is not None:
            self._chunks.prompt_token_ids(self._prompt_ids)
        return ()

    def write(self, event: ReplyEvent, sent: float | None = None) -> Sequence[bytes]:
        t = type(event)
        if t is TextDelta:
            return self._text(event, sent)  # type: ignore[arg-type]
        if t is ReplyEnded or t is ReplyFailed:
            return self._end(event, sent)
        raise TypeError(f"a text completion has no {t.__name__}")

    def body(self, reply: Reply) -> bytes:
        end = reply.end
        body = text_completion(
            id=self._id,
            model=self._model,
            created=self._created,
            text=reply.text,
            finish_reason=end.reason,
            usage=end.usage,
        )
        return self._with_ids(body, reply)
