"""The ``openai`` upstream protocol's chunks, decoded by msgspec into the few fields the relay reads.

One chunk arrives per token, and reading it was the largest single cost of the front after its HTTP client
(issue 22, ``benchmarks/front.py``): ``json.loads`` builds every field of the chunk as dicts and strings, and
the reader then looks the few it needs up again. msgspec decodes straight into the shapes below, skipping the
fields it is not asked for (``id``, ``model``, ``logprobs``, …), about 4 times faster than ``json.loads`` plus
the lookups.

The meaning stays ``_upstream_wire.OpenAITokenReader``'s, by construction: a chunk the shapes accept gives the
same ``UpstreamChunk`` as that reader, and one they refuse (bad JSON, a field of another type, an id outside
64 bits, a choice that is not an object, …) is handed to that reader, which returns or raises what it always
did. ``tests/test_upstream_wire.py`` checks the two agree on generated chunks of every shape.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tokenrelay.engines._upstream_wire import OpenAITokenReader, UpstreamChunk, stranded_policy
from tokenrelay.wire._chat_reader import error_from_body

__all__ = ["DecodingOpenAIReader"]


class _Delta(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    text: str | None = None
    token_ids: list[int] | None = None
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    prompt_token_ids: list[int] | None = None
    usage: _Usage | None = None
    error: Any = None


_decode = msgspec.json.Decoder(_Chunk).decode


class DecodingOpenAIReader(OpenAITokenReader):
    """``OpenAITokenReader`` with msgspec's typed decoding in front (see the module docstring)."""

    def feed(self, data: str) -> UpstreamChunk:
        if data == "[DONE]":
            return UpstreamChunk(done=True)
        try:
            chunk = _decode(data)
        except msgspec.DecodeError:  # (ValidationError too) not these shapes: the reference reader decides
            return OpenAITokenReader.feed(self, data)
        if chunk.error is not None:
            raise error_from_body(200, data.encode())
        choices = chunk.choices
        if not choices:  # the include_usage chunk
            usage = chunk.usage
            return UpstreamChunk(prompt_tokens=usage.prompt_tokens if usage is not None else None)
        choice = choices[0]
        token_ids = choice.token_ids
        delta = choice.delta
        added = delta.content if delta is not None else choice.text
        if token_ids is None:
            if added:  # text without ids: the reference reader's error
                return OpenAITokenReader.feed(self, data)
            ids: tuple[int, ...] = ()
        else:
            ids = tuple(token_ids)
        prompt_ids = choice.prompt_token_ids
        if prompt_ids is None:
            prompt_ids = chunk.prompt_token_ids
        return UpstreamChunk(
            ids,
            "",
            0,
            choice.finish_reason,
            len(prompt_ids) if prompt_ids is not None else None,
            False,
            stranded_policy(ids, added),
        )
