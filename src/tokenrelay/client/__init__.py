"""tokenrelay's streaming client (httpx, sync and async): SSE events, chat deltas, and JSON replies as values.

- :mod:`tokenrelay.client.stream`: :func:`iter_events` / :func:`aiter_events` for any SSE URL, and
  :func:`stream_chat` / :func:`astream_chat` for OpenAI-compatible chat streams, with the arrival times of
  every chunk.
- :mod:`tokenrelay.client.structured`: :func:`stream_json` / :func:`astream_json`, a reply asked to be JSON
  (``response_format``) read by one ``PartialJSON`` as it streams, ``finish_reason`` checked before the final
  parse, and validated by pydantic when a type is given.
"""

from tokenrelay.client.stream import (
    DEFAULT_TIMEOUT,
    ChatDelta,
    ChatReasoning,
    ChatResult,
    ChunkArrival,
    ClientTimings,
    StreamLog,
    aiter_events,
    astream_chat,
    iter_events,
    stream_chat,
)
from tokenrelay.client.structured import (
    CUT_FINISH_REASONS,
    JSONResult,
    JSONUpdate,
    astream_json,
    response_format_for,
    stream_json,
)

__all__ = [
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
