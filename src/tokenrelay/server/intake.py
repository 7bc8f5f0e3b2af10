"""What a request goes through before its response starts: the API key, the body, the prompt.

Everything knowable before the first byte is checked before the status line (issue 12): the key, the body's
size and how long it takes to arrive, the JSON and every field, the model, the prompt's size, its tokens and
the context they must fit in. A refused request gets an OpenAI-shaped 4xx, never a 200 and an in-stream error.

The costly part (parsing a large body, rendering a chat template, tokenizing) runs on a one-thread pool, not
on the event loop, so a 200 KB prompt cannot stall the streams already running; small requests, the common
case, are prepared inline where a thread hop would cost more than the work. ``max_prompt_chars`` bounds what
one request may cost there.

With an API key set, every path needs it except the ones listed in ``OPEN_PATHS`` and ``OPEN_PREFIXES``: the
health check, the chat page and its files, and the API description. Those cost no memory or CPU that grows with
the request; everything else — generations, the model list, ``/metrics``, the doctor's diagnostic streams,
unknown paths — is refused with a 401 before any work is done.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from starlette.types import Receive

from tokenrelay._errors import (
    AuthenticationError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    RequestTimeoutError,
)
from tokenrelay.engines.base import Engine

from .messages_request import parse_count_tokens, parse_messages
from .requests import Generation, parse_generation
from .responses_request import parse_responses

__all__ = ["OPEN_PATHS", "OPEN_PREFIXES", "ClientGone", "Intake", "Prepared", "check_key", "needs_key"]

OPEN_PATHS = frozenset({"/", "/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
OPEN_PREFIXES = ("/static/",)

# Bodies up to this size are parsed and tokenized on the event loop: a few KB take well under a millisecond.
INLINE_BODY_BYTES = 4096


class ClientGone(Exception):
    """The client disconnected before its request body was complete (a normal event, not an error)."""

    def __init__(self, received: int) -> None:
        super().__init__(f"the client disconnected after {received} bytes of the request body")
        self.received = received


def needs_key(path: str) -> bool:
    return path not in OPEN_PATHS and not path.startswith(OPEN_PREFIXES)


def check_key(headers: Sequence[tuple[bytes, bytes]], key: str) -> None:
    """Raise ``AuthenticationError`` unless ``headers`` carry ``Authorization: Bearer <key>`` or, as the
    Anthropic SDKs send it, ``x-api-key: <key>``."""
    given = next((value for name, value in headers if name == b"authorization"), b"")
    scheme, _, token = given.partition(b" ")
    if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), key.encode()):
        return
    anthropic = next((value for name, value in headers if name == b"x-api-key"), None)
    if anthropic is None or not hmac.compare_digest(anthropic.strip(), key.encode()):
        raise AuthenticationError(
            "invalid or missing API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')",
            code="invalid_api_key",
        )


async def read_body(
    receive: Receive, headers: Sequence[tuple[bytes, bytes]], *, limit: int, timeout: float
) -> bytes:
    """The whole request body: at most ``limit`` bytes (413), within ``timeout`` seconds (408)."""
    declared = next((value for name, value in headers if name == b"content-length"), b"")
    if declared.isdigit() and int(declared) > limit:
        raise _too_big(limit)
    chunks: list[bytes] = []
    size = 0
    # One deadline for the whole body: a client that trickles it a byte at a time must not hold a
    # connection (and a task) forever. A timer that cancels this task, not a cancel scope: it is on every
    # request's path, and costs a fifth of what anyio's scope does (benchmarks/server_load.py --profile).
    task = asyncio.current_task()
    assert task is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(timeout, expire)
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone(size)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_big(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
    except asyncio.CancelledError:
        if not expired:
            raise
        uncancel = getattr(task, "uncancel", None)  # Python 3.11+: take our cancel request back
        if uncancel is not None:
            uncancel()
        raise RequestTimeoutError(
            f"the request body did not arrive within {timeout:g} s ({size} bytes received)",
            code="request_timeout",
        ) from None
    finally:
        timer.cancel()
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_big(limit: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"request body over {limit} bytes", code="request_too_large")


class Parser(Protocol):
    """A dialect's request parser: a body in, a validated ``Generation`` out (400s naming the field)."""

    def __call__(
        self,
        body: bytes,
        kind: str,
        /,
        *,
        max_tokens_limit: int,
        default_max_tokens: int,
        max_prompt_chars: int | None = None,
    ) -> Generation: ...


#: Each endpoint kind's request parser (``generation.ENDPOINTS`` names the kind of each path).
PARSERS: dict[str, Parser] = {
    "chat": parse_generation,
    "completion": parse_generation,
    "responses": parse_responses,
    "messages": parse_messages,
}

#: The field a prompt that does not fit the context is blamed on, by endpoint kind ("messages" otherwise).
PROMPT_PARAMS: dict[str, str] = {"completion": "prompt", "responses": "input"}


@dataclass(frozen=True)
class Prepared:
    """A validated request and its prompt's token ids."""

    gen: Generation
    prompt_ids: list[int]


class Intake:
    """Turns a request body into a ``Prepared`` generation, or a 4xx."""

    def __init__(
        self,
        engine: Engine,
        models: Sequence[str],
        *,
        max_tokens_limit: int,
        default_max_tokens: int,
        max_prompt_chars: int,
        workers: int = 1,
    ) -> None:
        self.engine = engine
        self.models = tuple(models)
        self.max_tokens_limit = max_tokens_limit
        self.default_max_tokens = default_max_tokens
        self.max_prompt_chars = max_prompt_chars
        # Bounded: huge prompts queue here instead of taking every core (and the GIL) from the streams. One
        # worker by default: priming a detokenizer with a long prompt (``stream_events(executor=...)``, here
        # too) is Python code, and each more thread running it makes the event loop wait longer for the GIL.
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tokenrelay-intake")
        #: Per endpoint kind, a step after the parse that completes the request from the server's state (the
        #: Responses API's store puts a stored conversation first): before the prompt is tokenized.
        self.resolvers: dict[str, Callable[[Generation], Generation]] = {}

    async def prepare(self, body: bytes, kind: str) -> Prepared:
        if len(body) <= INLINE_BODY_BYTES:
            prepared = self._prepare(body, kind)
        else:
            prepared = await asyncio.get_running_loop().run_in_executor(self.pool, self._prepare, body, kind)
        params = prepared.gen.params
        constraint, grammar = params.constraint, params.grammar
        check = getattr(self.engine, "check_constraint", None)  # engines that compile a schema (issue 20)
        if constraint is not None and check is not None:
            # Compiling a grammar can take a while (tens of ms for a 20,000-value enum): off the event loop, and
            # before the status line, so a schema the engine cannot compile is a 400, not an in-stream error.
            await asyncio.get_running_loop().run_in_executor(self.pool, check, constraint)
        if grammar is not None and check is not None and getattr(self.engine, "enforces_grammars", False):
            # Tool calls' grammar (issue 21), checked the same way by the engines that enforce one.
            await asyncio.get_running_loop().run_in_executor(self.pool, check, grammar)
        return prepared

    def _prepare(self, body: bytes, kind: str) -> Prepared:
        gen = PARSERS[kind](
            body,
            kind,
            max_tokens_limit=self.max_tokens_limit,
            default_max_tokens=self.default_max_tokens,
            max_prompt_chars=self.max_prompt_chars,
        )
        resolve = self.resolvers.get(kind)
        if resolve is not None:
            gen = resolve(gen)
        if not gen.model:
            gen = dataclasses.replace(gen, model=self.engine.model)
        if gen.model not in self.models:
            raise NotFoundError(
                f"model '{gen.model}' does not exist; this server serves {', '.join(self.models)}",
                param="model",
                code="model_not_found",
            )
        prompt_ids = self.engine.prompt_ids(gen.prompt)
        n_ctx = getattr(self.engine, "n_ctx", None)  # engines with a context window say how large it is
        if isinstance(n_ctx, int) and len(prompt_ids) >= n_ctx:
            raise InvalidRequestError(
                f"the prompt is {len(prompt_ids)} tokens; the model's context holds {n_ctx}, "
                "with room for at least one more",
                param=PROMPT_PARAMS.get(gen.kind, "messages"),
                code="context_length_exceeded",
            )
        return Prepared(gen, prompt_ids)

    async def count_tokens(self, body: bytes) -> int:
        """``/v1/messages/count_tokens``: the tokens the prompt of a Messages request with this body would
        have, rendered and tokenized exactly as its generation's (``_prepare``)."""
        if len(body) <= INLINE_BODY_BYTES:
            return self._count(body)
        return await asyncio.get_running_loop().run_in_executor(self.pool, self._count, body)

    def _count(self, body: bytes) -> int:
        model, prompt = parse_count_tokens(body, max_prompt_chars=self.max_prompt_chars)
        if model not in self.models:
            raise NotFoundError(
                f"model '{model}' does not exist; this server serves {', '.join(self.models)}",
                param="model",
                code="model_not_found",
            )
        return len(self.engine.prompt_ids(prompt))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
