"""Where the terminal commands get their replies: the embedded engine, or a running server.

``tokenrelay generate`` and ``tokenrelay chat`` talk to a :class:`Backend`. :class:`EngineBackend` runs an
engine in this process through the same pipeline as the server (engine → detokenizer → stop matcher);
:class:`RemoteBackend` streams from any OpenAI-compatible server with tokenrelay's own client (chat requests,
or ``/v1/completions`` for a raw prompt), like ``ollama run`` against a running ``ollama serve``.

A :class:`Turn` records one reply while it streams (its text, when each piece arrived, how it ended), so a
reply cut short by Ctrl-C still has a summary. :func:`run_interruptible` runs a coroutine on the commands'
event loop and turns Ctrl-C into a cancellation of that coroutine, which stops the generation: the engine's
step loop is closed, or the server sees its client leave.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import time
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from tokenrelay._errors import ConfigError, NotFoundError, ProtocolError, TokenRelayError
from tokenrelay._stream import Timings, Usage
from tokenrelay.wire._chat_reader import error_from_body

if TYPE_CHECKING:
    from tokenrelay.engines import Engine
    from tokenrelay.wire._sse import ServerSentEvent

__all__ = [
    "Backend", "End", "EngineBackend", "Options", "Piece", "Prompt", "RemoteBackend", "Turn",
    "run_interruptible", "stream_turn",
]  # fmt: skip

Messages = Sequence[Mapping[str, str]]
Prompt = str | Messages  # a raw text prompt, or chat messages


@dataclass(frozen=True)
class Piece:
    """Text the model added; ``token_ids`` when the engine runs here (a server does not send them);
    ``reasoning``: the text is the model's reasoning, apart from the answer."""

    text: str
    token_ids: tuple[int, ...] = ()
    reasoning: bool = False


@dataclass(frozen=True)
class End:
    """How the reply ended: OpenAI's ``finish_reason``, the usage when known, the stop that matched."""

    reason: str | None
    usage: Usage | None
    matched: str | int | None = None


@dataclass(frozen=True)
class Options:
    max_tokens: int | None = 256
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int | None = None
    stops: tuple[str, ...] = ()
    include_stop: bool = False


class Backend(Protocol):
    @property
    def label(self) -> str:
        """What answers, for people: ``SmolLM2-135M-Instruct (embedded)``, ``model at URL``."""
        ...

    async def start(self) -> None:
        """Get ready (a server: check it answers, learn its model); raise a one-line error if it cannot."""
        ...

    def stream(self, prompt: Prompt, options: Options) -> AsyncGenerator[Piece | End, None]:
        """Pieces of the reply, then one :class:`End`."""
        ...

    async def aclose(self) -> None: ...


class EngineBackend:
    """An engine in this process. ``plain`` engines (the replay engine) get the last message's text."""

    def __init__(self, engine: Engine, *, plain: bool = False) -> None:
        self.engine = engine
        self.plain = plain

    @property
    def label(self) -> str:
        return f"{self.engine.model} (embedded)"

    async def start(self) -> None:
        return None

    async def stream(self, prompt: Prompt, options: Options) -> AsyncGenerator[Piece | End, None]:
        from tokenrelay._stream import Finished
        from tokenrelay.engines import SamplingParams, stream_events

        if self.plain and not isinstance(prompt, str):
            prompt = prompt[-1]["content"] if prompt else ""
        params = SamplingParams(
            max_tokens=options.max_tokens,
            temperature=options.temperature,
            top_p=options.top_p,
            seed=options.seed,
        )
        events = stream_events(
            self.engine, prompt, params, stops=options.stops, include_stop=options.include_stop
        )
        async with contextlib.aclosing(events):
            async for event in events:
                if isinstance(event, Finished):
                    yield End(event.reason, event.usage, event.matched)
                else:
                    yield Piece(event.text, event.token_ids)

    async def aclose(self) -> None:
        await self.engine.aclose()


class RemoteBackend:
    """An OpenAI-compatible server at ``base_url`` (the API root, ``…/v1``)."""

    def __init__(
        self, base_url: str, *, api_key: str | None = None, model: str | None = None, api: str = "auto"
    ) -> None:
        """``api``: ``"chat"`` (``/chat/completions``), ``"responses"`` (the Responses API), ``"messages"``
        (Anthropic's Messages API), or ``"auto"``: chat, and the Responses API from the first time the server
        answers chat with a 404 that is not about the model (a server that speaks only Responses)."""
        import httpx

        from tokenrelay.client import DEFAULT_TIMEOUT

        self.api = api
        self.base_url = base_url
        self.api_key = api_key
        self.model = model or ""
        self.http = httpx.AsyncClient(timeout=DEFAULT_TIMEOUT)

    @property
    def label(self) -> str:
        return f"{self.model or 'the default model'} at {self.base_url}"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @contextlib.contextmanager
    def _reaching(self) -> Iterator[None]:
        import httpx

        try:
            yield
        except httpx.TransportError as exc:  # refused, reset, timed out: one line, never a traceback
            reason = str(exc) or type(exc).__name__
            raise TokenRelayError(f"cannot reach {self.base_url}: {reason}") from exc

    async def start(self) -> None:
        """Check the server answers (and the key is right); without ``--model``, use its first model."""
        with self._reaching():
            response = await self.http.get(self.base_url + "/models", headers=self._headers())
        if response.status_code != 200:
            raise error_from_body(response.status_code, response.content, reason=response.reason_phrase)
        try:
            models = [m["id"] for m in response.json()["data"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(f"{self.base_url}/models: not an OpenAI model list") from exc
        if not self.model and models:
            self.model = str(models[0])

    def _params(self, options: Options) -> dict[str, object]:
        if self.api == "messages":  # Anthropic's names and ranges (temperature 0..1); no seed
            messages: dict[str, object] = {
                "temperature": min(options.temperature, 1.0),
                "top_p": options.top_p,
            }
            if options.max_tokens is not None:
                messages["max_tokens"] = options.max_tokens
            if options.stops:
                messages["stop_sequences"] = list(options.stops)
            return messages
        params: dict[str, object] = {"temperature": options.temperature, "top_p": options.top_p}
        if options.max_tokens is not None:
            params["max_tokens"] = options.max_tokens
        if options.seed is not None:
            params["seed"] = options.seed
        if options.stops:
            params["stop"] = list(options.stops)
        return params

    async def stream(self, prompt: Prompt, options: Options) -> AsyncGenerator[Piece | End, None]:
        from tokenrelay.client import ChatReasoning, ChatResult, astream_chat

        if isinstance(prompt, str):
            async for piece in self._completion(prompt, options):
                yield piece
            return
        params: dict[str, Any] = self._params(options)
        if self.api == "responses":
            for name in ("seed", "stop"):  # the Responses API has neither
                if params.pop(name, None) is not None:
                    raise ConfigError(f"--{name} cannot be sent to the Responses API (--api responses)")
        started = False
        with self._reaching():
            chat = astream_chat(
                self.base_url,
                prompt,
                model=self.model,
                client=self.http,
                api_key=self.api_key,
                api="responses"
                if self.api == "responses"
                else "messages"
                if self.api == "messages"
                else "chat",
                **params,
            )
            try:
                async with contextlib.aclosing(chat):
                    async for item in chat:
                        started = True
                        if isinstance(item, ChatResult):
                            yield End(item.finish_reason, item.usage)
                        else:
                            yield Piece(item.text, reasoning=isinstance(item, ChatReasoning))
            except NotFoundError as exc:
                if self.api != "auto" or started or exc.code == "model_not_found":
                    raise
                self.api = "responses"  # the server speaks the Responses API only
        if self.api == "responses" and not started:
            async for piece in self.stream(prompt, options):
                yield piece

    async def _completion(self, prompt: str, options: Options) -> AsyncGenerator[Piece | End, None]:
        """A raw prompt: ``POST /v1/completions`` streamed, read with the SSE client."""
        from tokenrelay.client import aiter_events

        body = {"model": self.model, "prompt": prompt, "stream": True, **self._params(options)}
        body["stream_options"] = {"include_usage": True}
        reason: str | None = None
        usage: Usage | None = None
        with self._reaching():
            events = cast(
                "AsyncGenerator[ServerSentEvent, None]",
                aiter_events(
                    self.base_url + "/completions",
                    client=self.http,
                    method="POST",
                    json=body,
                    headers=self._headers(),
                ),
            )
            async with contextlib.aclosing(events):
                async for event in events:
                    if event.data == "[DONE]":
                        break
                    chunk = json.loads(event.data)
                    if "error" in chunk:
                        raise error_from_body(200, event.data.encode("utf-8"))
                    for choice in chunk.get("choices") or ():
                        if choice.get("text"):
                            yield Piece(choice["text"])
                        reason = choice.get("finish_reason") or reason
                    if chunk.get("usage"):
                        u = chunk["usage"]
                        usage = Usage(int(u["prompt_tokens"]), int(u["completion_tokens"]))
        yield End(reason, usage)

    async def aclose(self) -> None:
        await self.http.aclose()


@dataclass
class Turn:
    """One reply as it streamed: pieces with their arrival times, and its end (``None`` if interrupted)."""

    clock: Callable[[], float] = time.perf_counter
    started: float = field(default=0.0)
    parts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)  # the reasoning, apart: never part of the answer
    times: list[float] = field(default_factory=list)
    token_ids: int = 0
    end: End | None = None
    ended_at: float | None = None
    interrupted: bool = False

    def __post_init__(self) -> None:
        self.started = self.clock()

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def add(self, item: Piece | End) -> None:
        if isinstance(item, End):
            self.end = item
            self.ended_at = self.clock()
        elif item.reasoning:
            self.reasoning.append(item.text)
            self.token_ids += len(item.token_ids)
        else:
            self.parts.append(item.text)
            self.times.append(self.clock())
            self.token_ids += len(item.token_ids)

    def interrupt(self) -> None:
        self.interrupted = True
        self.ended_at = self.clock()

    @property
    def timings(self) -> Timings:
        ttft = self.times[0] - self.started if self.times else None
        gaps = tuple(b - a for a, b in itertools.pairwise(self.times))
        total = None if self.ended_at is None else self.ended_at - self.started
        return Timings(ttft=ttft, gaps=gaps, total=total)

    @property
    def completion_tokens(self) -> int | None:
        usage = self.end.usage if self.end else None
        if usage is not None:
            return usage.completion_tokens
        return self.token_ids or None

    def summary(self) -> dict[str, object]:
        """The closing JSON object of ``generate --json`` (also when interrupted)."""
        end, t = self.end, self.timings
        usage = end.usage if end else None
        return {
            "finish_reason": end.reason if end else None,
            "interrupted": self.interrupted,
            "matched": end.matched if end else None,
            "usage": None
            if usage is None
            else {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
            },
            "timings": {
                "ttft_s": t.ttft,
                "inter_token_p50_s": t.p50,
                "inter_token_p95_s": t.p95,
                "total_s": t.total,
                "gaps_s": list(t.gaps),
            },
        }

    def stats(self) -> str:
        """One line for stderr: TTFT, inter-token p50/p95, total, tokens and rate, how it finished."""
        t = self.timings

        def ms(seconds: float | None) -> str:
            return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"

        tokens = self.completion_tokens
        rate = ""
        if tokens and tokens > 1 and t.total is not None and t.ttft is not None and t.total > t.ttft:
            rate = f" ({(tokens - 1) / (t.total - t.ttft):.0f} tok/s after the first)"
        finish = "interrupted" if self.interrupted else (self.end.reason if self.end else None) or "?"
        count = "?" if tokens is None else str(tokens)
        return (
            f"TTFT {ms(t.ttft)} · inter-token p50 {ms(t.p50)} p95 {ms(t.p95)} · total {ms(t.total)}"
            f" · {count} tokens{rate} · finish: {finish}"
        )


async def stream_turn(
    backend: Backend, prompt: Prompt, options: Options, turn: Turn, on_piece: Callable[[Piece], None]
) -> None:
    """Stream one reply into ``turn``, handing each piece to ``on_piece`` as it arrives."""
    stream = backend.stream(prompt, options)
    async with contextlib.aclosing(stream):
        async for item in stream:
            turn.add(item)
            if isinstance(item, Piece):
                on_piece(item)


def run_interruptible(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]) -> bool:
    """Run ``coro`` on ``loop``; Ctrl-C cancels it (and whatever it awaits) instead of tearing through it.

    Returns ``False`` when Ctrl-C stopped it, ``True`` when it finished. Outside the main thread (where no
    signal handler can be set) Ctrl-C is a ``KeyboardInterrupt`` as usual.
    """
    task = loop.create_task(coro)
    interrupted = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
        handled = True
    except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
        handled = False
    try:
        loop.run_until_complete(task)
    except asyncio.CancelledError:
        if not interrupted:
            raise
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGINT)
    return not interrupted
