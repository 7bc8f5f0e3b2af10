"""tokenrelay's streaming client (httpx, sync and async): SSE events, chat deltas, and JSON replies as values.

- :mod:`tokenrelay.client.stream`: :func:`iter_events` / :func:`aiter_events` for any SSE URL, with the
  arrival times of every chunk.
- :mod:`tokenrelay.client.chat`: :func:`stream_chat` / :func:`astream_chat` for chat streams in any of the
  three APIs tokenrelay serves (Chat Completions, Responses, Messages), reasoning apart from the answer.
- :mod:`tokenrelay.client.structured`: :func:`stream_json` / :func:`astream_json`, a reply asked to be JSON
  (``response_format``) read by one ``PartialJSON`` as it streams, ``finish_reason`` checked before the final
  parse, and validated by pydantic when a type is given.
"""

from tokenrelay.client.chat import (
    APIS,
    ChatDelta,
    ChatReasoning,
    ChatResult,
    ClientTimings,
    astream_chat,
    stream_chat,
)
from tokenrelay.client.stream import DEFAULT_TIMEOUT, ChunkArrival, StreamLog, aiter_events, iter_events
from tokenrelay.client.structured import (
    CUT_FINISH_REASONS,
    JSONResult,
    JSONUpdate,
    astream_json,
    response_format_for,
    stream_json,
)

__all__ = [
    "APIS",
    "CUT_FINISH_REASONS",
    "DEFAULT_TIMEOUT",
    "ChatDelta",
    "ChatReasoning",
    "ChatResult",
    "ChunkArrival",
    "ClientTimings",
    "JSONResult",
    "JSONUpdate",
    "StreamLog",
    "aiter_events",
    "astream_chat",
    "astream_json",
    "iter_events",
    "response_format_for",
    "stream_chat",
    "stream_json",
]
