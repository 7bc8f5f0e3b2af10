"""The upstream engine: token ids relayed from running engine servers (vLLM, SGLang, TGI, tokenrelay, …).

``UpstreamEngine(urls, tokenizer, protocol=...)`` implements the ``Engine`` protocol over HTTP: each
generation is one streamed request to one replica, asking for token ids (``_upstream_wire`` has the
protocols), and the ids go through tokenrelay's own detokenizer, stop matcher and wire like any engine's.
llama.cpp's server is the exception: its ids are incomplete, so its text deltas are relayed (``TextStep``).

Replicas (every URL serves the same model):

- routing: each request goes to the healthy replica with the fewest generations in flight (ties rotate);
- health: ``GET /health`` every ``health_interval`` seconds; a replica that refuses a connection, times out
  or answers 5xx is marked down at once, and the health check brings it back;
- retries: a request that fails before its first token is retried on another replica (each replica at most
  once); once a token was relayed it is never retried, since the client already has part of a reply;
- cancellation: closing the generator (the client left) closes the upstream response, and so its connection,
  which is how every one of these servers learns to abort the request;
- errors: an upstream 4xx becomes the same OpenAI-shaped error (the client sent something the engine
  refuses), a failure of every replica becomes ``EngineError`` (500) naming the last cause;
- state: ``health()`` reports each replica's state (the server's ``GET /health`` shows it, and answers 503
  when no replica is healthy);
- structured output: ``params.constraint`` goes to the replica in its protocol's field (``_upstream_wire``);
  the replica enforces it;
- tool calls (issue 21): replicas that send ids get the generic format's turns (the front extracts the calls);
  llama-server gets OpenAI's turns and ``tools`` (``_tools.wire_chat``), and its parsed calls are relayed;
  so is the reasoning it sends apart (issue 31: written back as ``reasoning_markup``, the splitter's format);
- metrics: per replica, requests, failures, retries away from it, tokens, cancellations, in flight and up
  (``metrics_collector()`` is a Prometheus collector the server registers);
- several worker processes (``serve --workers N``): ``share_counts`` puts each replica's numbers in cells
  every worker reads (``server.board``), so the least-loaded pick counts every worker's requests in flight,
  and the metrics and ``health()`` are the whole server's.

It is over 400 lines because the replica state, the retry loop and the two stream shapes (ids, llama.cpp's
text) are one request's path through one class; the wire (``_upstream_wire``) and the client are apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import httpx
import msgspec

from tokenrelay._errors import ConfigError, EngineError, InvalidRequestError, ProtocolError, TokenRelayError
from tokenrelay._protocols import Tokenizer
from tokenrelay._tools import ChatWithTools, wire_chat
from tokenrelay.engines._upstream_wire import (
    LLAMACPP_MAX_ENUM_VALUES,
    PROTOCOLS,
    RELAYED_REASONING,
    Protocol,
    enum_values,
    openai_response_format,
    reader_for,
    request,
)
from tokenrelay.engines.base import (
    EngineFinished,
    JSONConstraint,
    Prompt,
    PromptTokens,
    SamplingParams,
    Step,
    Stranded,
    TextStep,
    render_plain_chat,
)
from tokenrelay.engines.replicas import Replica, ReplicaCollector, SharedCells, SharedReplica
from tokenrelay.engines.upstream_client import ReplicaConnections, Response
from tokenrelay.engines.upstream_decode import DecodingOpenAIReader
from tokenrelay.wire._chat_reader import error_from_body

__all__ = ["Replica", "UpstreamEngine", "discover_model"]

# Each upstream event's JSON, decoded by msgspec: some 3 times faster than json.loads on a chat chunk, and the
# same values (dicts, lists, str, int, float, bool, None; it refuses what is not JSON text, NaN or a lone
# surrogate included, with a ValueError). One chunk per token made json.loads the largest single cost of
# reading a replica (benchmarks/front.py, py-spy).
_decode_json = msgspec.json.Decoder().decode


def response_format(constraint: JSONConstraint | None) -> dict[str, Any] | None:
    """The OpenAI ``response_format`` for ``constraint`` (rebuilt from what the front checked)."""
    if constraint is None:
        return None
    return openai_response_format(
        constraint.schema, constraint.name, constraint.description, constraint.strict
    )


class _Retry(Exception):
    """This replica failed before the first token; another may be tried."""


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def discover_model(url: str, *, timeout: float = 10.0, api_key: str | None = None) -> str:
    """The model an OpenAI-compatible server serves (the first of ``GET /v1/models``)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(_base(url) + "/v1/models", timeout=timeout, headers=headers)
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ConfigError(f"could not read the model from {url}/v1/models ({exc}); pass --model") from exc


class UpstreamEngine:
    """Relays generations from ``urls`` (replicas of one model); see the module docstring."""

    def __init__(
        self,
        urls: Sequence[str],
        tokenizer: Tokenizer,
        *,
        model: str | None = None,
        protocol: Protocol = "openai",
        api_key: str | None = None,
        health_interval: float = 5.0,
        connect_timeout: float = 5.0,
        read_timeout: float = 300.0,
        stop_token_ids: frozenset[int] | None = None,
        stranded: Literal["replace", "discard"] = "discard",
    ) -> None:
        if not urls:
            raise ConfigError("the upstream engine needs at least one --upstream URL")
        if protocol not in PROTOCOLS:
            raise ConfigError(f"unknown upstream protocol {protocol!r}: one of {', '.join(PROTOCOLS)}")
        self.replicas = [Replica(_base(u)) for u in urls]
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # Each replica's kept-alive connections, by URL (``share_counts`` replaces the Replica objects).
        self._connections = {
            r.url: ReplicaConnections(
                r.url, connect_timeout=connect_timeout, read_timeout=read_timeout, headers=headers
            )
            for r in self.replicas
        }
        self._tokenizer = tokenizer
        self._upstream_model = model
        self._model = model or "upstream"
        self.protocol: Protocol = protocol
        # A text replica sends reasoning apart; its reader writes it back as markup the splitter reads (issue 31).
        self.reasoning_markup = RELAYED_REASONING if protocol == "llamacpp" else None
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._health_interval = health_interval
        self._timeout = httpx.Timeout(read_timeout, connect=connect_timeout)  # health checks only
        self._stop_ids = stop_token_ids if stop_token_ids is not None else tokenizer.eos_token_ids
        self._client: httpx.AsyncClient | None = None
        self._health_task: asyncio.Task[None] | None = None
        self._turn = itertools.count()
        self._checked = False  # whether health() has probed the replicas yet
        # vLLM, SGLang and TGI never emit the bytes of a character a reply was cut inside; nor, by default, do
        # we. An OpenAI-protocol replica's text says what it does (tokenrelay's ends such a reply with U+FFFD),
        # and each reply ends as that text did (``_upstream_wire._stranded``).
        self.stranded = stranded

    # -- the Engine protocol ----------------------------------------------------------------------------

    @property
    def model(self) -> str:
        return self._model

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def stop_token_ids(self) -> frozenset[int]:
        return self._stop_ids

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        # The replica applies the chat template; here the ids only give the detokenizer its context (a reply
        # continues a prompt) and count usage. A text prompt is exact; a chat prompt is counted as plain turns.
        return self._tokenizer.encode(render_plain_chat(prompt))

    def check_constraint(self, constraint: JSONConstraint) -> None:
        """Refuse what llama.cpp's server would take minutes over (``LLAMACPP_MAX_ENUM_VALUES``); each replica
        enforces the schema itself and refuses what it cannot."""
        values = enum_values(constraint.schema) if self.protocol == "llamacpp" and constraint.schema else 0
        if values > LLAMACPP_MAX_ENUM_VALUES:
            param = "response_format.json_schema.schema"
            raise InvalidRequestError(
                f"{param}: the schema lists {values:,} enum values; llama.cpp's server (this front's replicas) "
                f"is given at most {LLAMACPP_MAX_ENUM_VALUES:,}: its grammar sampler takes minutes over one",
                param=param,
            )

    async def generate(
        self, prompt: Prompt, params: SamplingParams, *, prompt_ids: Sequence[int]
    ) -> AsyncIterator[Step]:
        # The replicas apply their own chat template (and say how many tokens the prompt was: PromptTokens),
        # so the messages are what is sent; ``prompt_ids``, our tokenizer's count, is not needed here.
        del prompt_ids
        messages: str | list[dict[str, Any]] = (
            prompt if isinstance(prompt, str) else [dict(m) for m in prompt]
        )
        tools: dict[str, Any] | None = None
        if isinstance(prompt, ChatWithTools) and self.protocol == "llamacpp":
            messages, tools = wire_chat(prompt)  # llama-server renders and parses tools itself
        try:
            path, body = request(
                self.protocol,
                messages,
                model=self._upstream_model,
                max_tokens=params.max_tokens,
                temperature=params.temperature,
                top_p=params.top_p,
                seed=params.seed,
                response_format=response_format(params.constraint),
                tools=tools,
            )
        except ValueError as exc:
            raise InvalidRequestError(f"{exc}; send /v1/completions", param="messages") from exc
        payload = json.dumps(body).encode()
        self._ensure_started()
        tried: set[Replica] = set()
        last = "no replica"
        while True:
            replica = self._pick(tried)
            if replica is None:
                raise EngineError(f"every upstream replica failed ({len(tried)} tried); last: {last}")
            tried.add(replica)
            replica.active += 1
            replica.requests += 1
            relayed = 0  # ids (or text steps) passed on: once there is one, no retry
            ended = False  # the upstream said the reply is over (a finish reason or [DONE])
            response: Response | None = None
            try:
                response = await self._open(replica, path, payload)
                reader = (
                    DecodingOpenAIReader()
                    if self.protocol == "openai"
                    else reader_for(self.protocol, max_tokens=params.max_tokens, loads=_decode_json)
                )
                feed, text_protocol = reader.feed, reader.text_protocol
                stranded = self.stranded  # as the upstream's text ends a reply cut inside a character, so far
                prompt_told = False
                while True:
                    # Every event that arrived since the last look: their ids go on as one step, so tokens
                    # that arrived together leave in one frame (a busy front, a client that reads slowly).
                    events = await response.next_events()
                    if not events:
                        break
                    ids: list[int] = []
                    for event in events:
                        try:
                            chunk = feed(event.data)
                        except TokenRelayError:
                            if ids:  # what came before the bad event is the reply's
                                relayed += len(ids)
                                yield ids
                            raise
                        if chunk.finish_reason is not None or chunk.done:
                            ended = True
                        if chunk.prompt_tokens is not None and not prompt_told:
                            prompt_told = True  # the replica's own count (its chat template, its BOS)
                            yield PromptTokens(chunk.prompt_tokens)  # (the first event: no ids before it)
                        if chunk.token_ids:
                            replica.tokens += len(chunk.token_ids)
                            if chunk.stranded is not None and chunk.stranded != stranded:
                                if ids:  # the ids before it end as the old rule says
                                    relayed += len(ids)
                                    yield ids
                                    ids = []
                                stranded = chunk.stranded
                                yield Stranded(stranded)
                            ids += chunk.token_ids
                        elif text_protocol and (chunk.text or chunk.tokens):
                            relayed += 1
                            replica.tokens += chunk.tokens
                            yield TextStep(chunk.text, chunk.tokens)
                        if chunk.finish_reason == "length" or chunk.done:
                            if ids:
                                relayed += len(ids)
                                yield ids
                                ids = []
                            if chunk.finish_reason == "length":
                                # The replica cut the reply (its context is full, or its own limit): a
                                # "length" finish even when our max_tokens is not reached.
                                yield EngineFinished("length")
                            if chunk.done:
                                return
                    if ids:
                        relayed += len(ids)
                        yield ids
                if not ended:
                    raise EngineError(f"upstream {replica.url} ended the stream before the reply finished")
                return
            except (GeneratorExit, asyncio.CancelledError):
                # The consumer left: the client did, or the reply ended here (a stop string, max_tokens).
                at_limit = params.max_tokens is not None and relayed >= params.max_tokens
                if ended or at_limit:  # the replica ends it too: read its end so the connection is reused
                    ended = True
                else:  # closing the connection is how the replica learns to stop generating
                    replica.cancelled += 1
                raise
            except InvalidRequestError:
                raise  # the engine refuses the request itself: every replica would
            except (OSError, TokenRelayError, _Retry) as exc:  # (ConnectionError, TimeoutError: OSErrors)
                reason = str(exc) or type(exc).__name__
                if not isinstance(exc, _Retry):
                    replica.down(reason)
                if relayed:  # part of the reply is out: a retry would send a different one
                    raise EngineError(f"upstream {replica.url} failed mid-stream: {reason}") from exc
                last = f"{replica.url}: {reason}"
                replica.retried_away += 1
            finally:
                replica.active -= 1
                if response is not None:
                    response.release(drain=1.0 if ended else 0.0)

    async def _open(self, replica: Replica, path: str, payload: bytes) -> Response:
        """POST to ``replica``; its answer once it is known to be an event stream. Anything else is an error
        (and the replica is marked down when it is the replica's fault)."""
        response = await self._connections[replica.url].post(path, payload)
        if response.status == 200 and response.content_type.startswith("text/event-stream"):
            replica.healthy = True  # it answers: whatever a health check said, it is up
            return response
        try:
            raw = await response.read()
        finally:
            response.release()
        if response.status != 200:
            error = error_from_body(response.status, raw, reason=response.reason)
            if self.protocol == "llamacpp" and "requires --jinja" in error.message:  # tools, not the replica
                message = f"the upstream llama-server takes no tools ({error.message}): run it with --jinja"
                raise InvalidRequestError(message, param="tools", code="unsupported_parameter")
            if response.status >= 500:
                replica.down(error.message)
            if response.status >= 500 or response.status == 429:
                raise _Retry(error.message)
            raise error
        kind = response.content_type or "no content type"
        raise ProtocolError(f"upstream answered {kind}, not an event stream: {raw[:200]!r}")

    # -- replicas ---------------------------------------------------------------------------------------

    def _pick(self, tried: set[Replica]) -> Replica | None:
        candidates = [r for r in self.replicas if r not in tried]
        healthy = [r for r in candidates if r.healthy] or candidates  # all down: try them anyway
        if not healthy:
            return None
        turn = next(self._turn)
        n = len(self.replicas)
        # Least in flight; ties broken by a rotating start, so equal replicas share the load.
        return min(healthy, key=lambda r: (r.load(), (self.replicas.index(r) - turn) % n))

    def _ensure_started(self) -> httpx.AsyncClient:
        if self._client is None:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
            self._client = httpx.AsyncClient(timeout=self._timeout, limits=limits)
        if self._health_task is None and self._health_interval > 0:
            self._health_task = asyncio.get_running_loop().create_task(self._health_loop())
        return self._client

    async def check_health(self) -> None:
        """Probe every replica once (``GET /health``) and mark it up or down."""
        client = self._ensure_started()

        async def probe(replica: Replica) -> None:
            try:
                response = await client.get(replica.url + "/health", headers=self._headers, timeout=5.0)
            except httpx.HTTPError as exc:
                replica.healthy, replica.last_error = False, f"health: {type(exc).__name__}"
                return
            replica.healthy = response.status_code == 200
            if not replica.healthy:
                replica.last_error = f"health: HTTP {response.status_code}"

        await asyncio.gather(*(probe(r) for r in self.replicas))

    async def health(self) -> dict[str, object]:
        """Each replica's state, for the server's ``GET /health`` (503 when ``healthy`` is false: no replica
        is up). The first call checks every replica, so a front that has served nothing yet reports what it
        found, not what it assumed; later calls report the health loop's latest view."""
        if not self._checked:
            self._checked = True
            await self.check_health()
        else:
            self._ensure_started()
        replicas = [
            {
                "url": r.url,
                "healthy": r.up(),
                "active": r.load(),
                "requests": r.total("requests"),
                "failures": r.total("failures"),
                "last_error": r.last_error or None,
            }
            for r in self.replicas
        ]
        return {"healthy": any(r.up() for r in self.replicas), "replicas": replicas}

    async def _health_loop(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.check_health()
            await asyncio.sleep(self._health_interval)

    def share_counts(self, cells: Sequence[SharedCells]) -> None:
        """Count into ``cells``, one per replica in order, shared with the server's other worker processes."""
        if len(cells) != len(self.replicas):
            raise ValueError(f"{len(cells)} shared cells for {len(self.replicas)} replicas")
        self.replicas = [SharedReplica(r.url, c) for r, c in zip(self.replicas, cells, strict=True)]

    def metrics_collector(self) -> ReplicaCollector:
        """A Prometheus collector of the per-replica numbers (the server registers it on its registry)."""
        return ReplicaCollector(self)

    async def aclose(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._health_task
            self._health_task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        for connections in self._connections.values():
            connections.close()
