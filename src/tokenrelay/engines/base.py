"""What every engine offers: ``generate(prompt, params, prompt_ids=...)`` as an async iterator of token-id steps.

An engine produces token ids, never text: text comes from tokenrelay's own detokenizer (``TextStream``), so
every engine gets the same UTF-8 and stop-string handling. A *step* is the ids one engine iteration produced,
usually one, several for a speculative or batched engine (the replay engine's ``burst``).

Cancellation contract: ``generate`` returns an async generator. When its consumer cancels the task that is
iterating it, or closes it (``aclose()``, ``contextlib.aclosing``), the engine starts no further step; at most
the step already running finishes. A generation never keeps computing to the end in a thread after its
consumer is gone. A failure mid-stream raises ``EngineError`` from the iterator, it never hangs.

One tokenization per request (issue 23): the caller tokenizes the prompt once, with ``engine.prompt_ids``
(the server's intake does it before the response starts, off the event loop for a long prompt;
``stream_events`` when it is not given them), and hands the ids to ``generate``. An engine that runs the model
itself (llama.cpp, vLLM) reads those ids and never renders or tokenizes the prompt again; an engine whose
replicas apply their own chat template (``upstream``) still sends ``prompt``, the messages, and uses the ids
for nothing but what it must know locally. Both travel together so that every engine takes what it needs.

An engine may set ``stranded = "discard"`` when its own server drops the bytes of a character left unfinished
at the end of a reply (vLLM's detokenizer never emits them, so a reply cut by ``max_tokens`` inside an emoji
ends before it); the default, ``"replace"``, ends it with U+FFFD as the tokenizer's full decode does. An engine
that learns it per reply (a relay reads its upstream's text) yields :class:`Stranded` instead.

Step times (issue 13): an engine that knows when a step was computed yields it as :class:`TimedIds`, the ids
with the step's start and end on ``time.perf_counter`` (the clock ``stream_events`` and the server use); the
embedded llama.cpp engine times each ``llama_decode`` so, the replay engine its release. Any other step is
timed by its arrival in ``stream_events``, marked as not measured.

Structured output (issue 20): ``params.constraint`` is a :class:`JSONConstraint` when the request asked for
JSON (``response_format``), already checked against the subset of JSON Schema tokenrelay can enforce
(``_schema_subset``). An engine that enforces it constrains every sampled token (the llama.cpp engine with
llguidance masks, vLLM with its structured outputs, an upstream replica with its own); an engine that can
refuse a schema before anything runs offers ``check_constraint(constraint)``, which raises
``InvalidRequestError`` and which the server calls at intake, off the event loop, so a schema it cannot
compile is a 400, never an error inside a stream. The replay engine ignores the constraint: it replays its
text, JSON or not.

An engine also stops by itself after ``params.max_tokens`` ids and after yielding an end-of-sequence id (one
of ``stop_token_ids``); ``TextStream`` does the same bookkeeping, so the two never disagree about where a
reply ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from tokenrelay._errors import EngineError, InvalidRequestError, TokenRelayError
from tokenrelay._json_fence import UnfencedEvents
from tokenrelay._protocols import Tokenizer
from tokenrelay._reasoning import ReasoningFormat, ReplyStart
from tokenrelay._stream import Event, Finished, FinishReason, StepTimeline, TextDelta, TextStream

__all__ = [
    "ChatMessage",
    "Engine",
    "EngineFinished",
    "JSONConstraint",
    "Prompt",
    "PromptTokens",
    "SamplingParams",
    "Step",
    "Stranded",
    "TextStep",
    "ThinkingBudget",
    "TimedIds",
    "render_plain_chat",
    "stream_events",
    "timed_ids",
]

ChatMessage: TypeAlias = Mapping[str, str]
"""One chat turn: ``{"role": "user" | "system" | "assistant", "content": "..."}``."""

Prompt: TypeAlias = str | Sequence[ChatMessage]
"""A raw text prompt (completion) or a list of chat turns (rendered with the model's chat template)."""


@dataclass(frozen=True)
class TextStep:
    """Text an engine hands over instead of ids, and how many tokens made it.

    Only for engines whose ids cannot be trusted (llama.cpp's server drops the ids of tokens that end inside a
    UTF-8 character): the text skips the detokenizer; stop strings, ``max_tokens`` and framing still apply.
    """

    text: str
    tokens: int = 1


@dataclass(frozen=True)
class PromptTokens:
    """How many tokens the prompt really was, when only the engine knows (an upstream server applied its own
    chat template): ``usage.prompt_tokens`` reports it. Yield it before the ids."""

    count: int


@dataclass(frozen=True)
class EngineFinished:
    """The engine ended the reply itself, for ``reason``: an upstream server whose context filled up says
    ``"length"`` before ``max_tokens``. Yield it after the reply's last ids; without it, an engine that simply
    stops ends the reply with ``"stop"``."""

    reason: FinishReason


@dataclass(frozen=True)
class Stranded:
    """How the engine's own text ends a reply cut inside a character, from now on: ``"replace"`` (with
    U+FFFD, as tokenrelay's server and the tokenizer's full decode) or ``"discard"`` (as vLLM). An upstream
    engine yields it when its server's text shows which, before the ids it read that from, so a relay ends
    every reply as its upstream did; without it, the engine's ``stranded`` attribute holds."""

    policy: Literal["replace", "discard"]


class TimedIds(tuple[int, ...]):
    """The ids of one step and when the engine computed it: ``started`` and ``ended`` are
    ``time.perf_counter()`` seconds. A tuple, so every consumer of plain id steps reads it unchanged. Make
    one with :func:`timed_ids`."""

    started: float
    ended: float


def timed_ids(ids: Iterable[int], started: float, ended: float) -> TimedIds:
    """``ids`` as a step computed from ``started`` to ``ended``."""
    # Attributes set here rather than in a __new__ override: a Python-level __new__ costs 2-3 times as much,
    # on every step of every stream.
    step = TimedIds(ids)
    step.started = started
    step.ended = ended
    return step


Step: TypeAlias = Sequence[int] | TextStep | PromptTokens | EngineFinished | Stranded
"""The token ids one engine iteration produced (or, rarely, a ``TextStep``, ``PromptTokens``,
``EngineFinished`` or ``Stranded``)."""


# Prompts up to this many ids prime a detokenizer in well under a millisecond.
_INLINE_PROMPT_IDS = 512


@dataclass(frozen=True)
class JSONConstraint:
    """The reply must be one JSON value: any JSON object (``schema is None``: ``{"type": "json_object"}``) or
    one valid against ``schema``, a JSON Schema as compact JSON text (its property order kept: engines generate
    properties in that order). ``name``, ``description`` and ``strict`` are the request's, passed on to
    upstream servers as given. Hashable, so engines can cache what they compile from it."""

    schema: str | None = None
    name: str | None = None
    description: str | None = None
    strict: bool | None = None


@dataclass(frozen=True)
class ThinkingBudget:
    """At most ``budget`` tokens of reasoning (``0``: none), in ``fmt``'s tags, for a reply that starts at
    ``start``: the engines that sample here write the closing tag themselves once it is spent
    (``_reasoning_budget``)."""

    fmt: ReasoningFormat
    start: ReplyStart
    budget: int


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature == 0`` is greedy; ``seed`` makes sampling repeatable; ``constraint``, when
    set, is the JSON the reply must be (see the module docstring); ``grammar`` a grammar it must match, in
    llguidance's Lark dialect (tool calls, issue 21: ``_tools.tool_grammar``), for the engines that enforce one
    (``enforces_grammars``: their ``check_constraint`` takes the grammar's text too)."""

    max_tokens: int | None = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    constraint: JSONConstraint | None = None
    grammar: str | None = None
    thinking: ThinkingBudget | None = None

    def __post_init__(self) -> None:
        # The OpenAI API's own bounds, so a bad request is a 400 naming the field, not an engine crash.
        if self.max_tokens is not None and self.max_tokens < 1:
            raise InvalidRequestError("max_tokens must be at least 1", param="max_tokens")
        if not 0.0 <= self.temperature <= 2.0:
            raise InvalidRequestError("temperature must be between 0 and 2", param="temperature")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidRequestError("top_p must be greater than 0 and at most 1", param="top_p")


@runtime_checkable
class Engine(Protocol):
    """A token-id generator behind one model."""

    @property
    def model(self) -> str:
        """The model name reported to clients (the OpenAI ``model`` field)."""
        ...

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer whose ids ``generate`` yields; ``TextStream`` decodes with it."""
        ...

    @property
    def stop_token_ids(self) -> frozenset[int]:
        """Ids that end a reply (EOS, end-of-turn); they are never shown as text."""
        ...

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        """The ids the model reads for ``prompt`` (after any chat template), for usage counting."""
        ...

    def generate(
        self, prompt: Prompt, params: SamplingParams, *, prompt_ids: Sequence[int]
    ) -> AsyncIterator[Step]:
        """Token-id steps for ``prompt``, whose ids are ``prompt_ids`` (``self.prompt_ids(prompt)``, computed
        once by the caller: the engine does not tokenize again); stops promptly when cancelled or closed (see
        module docstring)."""
        ...

    async def aclose(self) -> None:
        """Release the model; the engine is unusable afterwards."""
        ...


def render_plain_chat(prompt: Prompt) -> str:
    """A template-free rendering of a prompt, for engines without a chat template of their own."""
    if isinstance(prompt, str):
        return prompt
    return "".join(f"{m.get('role', 'user')}: {m.get('content', '')}\n" for m in prompt)


async def stream_events(
    engine: Engine,
    prompt: Prompt,
    params: SamplingParams,
    *,
    stops: Sequence[str] = (),
    include_stop: bool = False,
    clock: Callable[[], float] = time.perf_counter,
    prompt_ids: Sequence[int] | None = None,
    executor: Executor | None = None,
    step_times: bool = False,
    skip_special_tokens: bool = True,
    on_stream: Callable[[TextStream], None] | None = None,
) -> AsyncGenerator[Event, None]:
    """Run ``engine`` through a ``TextStream``: ``TextDelta`` events, then exactly one ``Finished``.

    The glue every front end shares (CLI, server, benchmarks). The engine's iterator is closed as soon as the
    stream finishes (a stop string, a stop id, ``max_tokens``), so the engine computes no step past the end;
    closing or cancelling this iterator closes the engine's too. An engine failure that is not already a
    ``TokenRelayError`` is raised as ``EngineError``. Timestamps come from ``clock``, started before the
    prompt is tokenized, so TTFT includes prefill. ``prompt_ids`` are ``engine.prompt_ids(prompt)`` when the
    caller already has them (the server tokenizes off the event loop, before the response starts); a long
    prompt primes the detokenizer on ``executor`` (default: the event loop's), never on the loop itself.

    ``step_times``: every event carries ``steps``, when the step of each of its tokens ran (``TimedIds``
    times, or the step's arrival here on ``clock`` for engines that do not time their steps).
    ``skip_special_tokens=False`` keeps special tokens in the text (markers that are special tokens, as
    Mistral's ``[THINK]`` and ``[TOOL_CALLS]``, for the hold-back that reads them). ``on_stream`` is given the
    ``TextStream`` once it is made (a caller that may end the reply itself reads its usage there).
    """
    started = clock()
    if prompt_ids is None:
        prompt_ids = engine.prompt_ids(prompt)
    max_tokens = params.max_tokens
    # An engine whose requests each hold ``n_ctx`` tokens ends a reply when its sequence is full: that is a
    # "length" finish like max_tokens, never a silent "stop".
    n_ctx = getattr(engine, "n_ctx", None)
    if isinstance(n_ctx, int) and n_ctx > len(prompt_ids):
        room = n_ctx - len(prompt_ids)
        max_tokens = room if max_tokens is None else min(max_tokens, room)

    def text_stream() -> TextStream:
        return TextStream(
            engine.tokenizer,
            stops=stops,
            include_stop=include_stop,
            stop_token_ids=engine.stop_token_ids,
            max_tokens=max_tokens,
            prompt_ids=prompt_ids,
            skip_special_tokens=skip_special_tokens,
            started_at=started,
            stranded=getattr(engine, "stranded", "replace"),
        )

    # The detokenizer is primed with the prompt (it decodes it): for a long prompt that is milliseconds of
    # work, which must not stall a server's event loop (issue 12), so it happens in a worker thread.
    if len(prompt_ids) <= _INLINE_PROMPT_IDS:
        stream = text_stream()
    else:
        stream = await asyncio.get_running_loop().run_in_executor(executor, text_stream)
    if on_stream is not None:
        on_stream(stream)
    # A constrained reply's grammar lets the model write a Markdown fence around its JSON (_json_fence): it is
    # taken out here, so every front end gets the JSON alone.
    unfenced = UnfencedEvents() if params.constraint is not None else None
    timeline = StepTimeline() if step_times else None
    end_reason: FinishReason = "stop"
    steps = engine.generate(prompt, params, prompt_ids=prompt_ids)
    try:
        async for step in steps:
            now = clock()
            if isinstance(step, TextStep):
                if timeline is not None:
                    timeline.add(step.tokens, now, now, measured=False)
                events = stream.feed_text(step.text, step.tokens, now=now)
            elif isinstance(step, PromptTokens):
                stream.set_prompt_tokens(step.count)
                continue
            elif isinstance(step, EngineFinished):
                end_reason = step.reason
                continue
            elif isinstance(step, Stranded):
                stream.set_stranded(step.policy)
                continue
            else:
                if timeline is not None:
                    if isinstance(step, TimedIds):
                        timeline.add(len(step), step.started, step.ended, measured=True)
                    else:
                        timeline.add(len(step), now, now, measured=False)
                events = stream.feed(step, now=now)
            if unfenced is not None:
                events = unfenced.feed(events)
            for event in events:
                if timeline is None:
                    yield event
                else:
                    yield _with_steps(event, timeline, text=isinstance(step, TextStep))
            if stream.finished is not None:
                return
    except TokenRelayError:
        raise
    except Exception as exc:
        raise EngineError(f"{engine.model}: generation failed: {exc}") from exc
    finally:
        aclose = getattr(steps, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
    events = stream.finish(now=clock(), reason=end_reason)
    for event in unfenced.feed(events) if unfenced is not None else events:
        yield event if timeline is None else _with_steps(event, timeline, text=False)


def _with_steps(event: Event, timeline: StepTimeline, *, text: bool) -> Event:
    """``event`` with the step times of its tokens. Text an engine made itself has no ids: a delta of it takes
    every token fed since the previous delta (the stop matcher may have held some back)."""
    if isinstance(event, TextDelta):
        count = len(timeline) if text else len(event.token_ids)
        return dataclasses.replace(event, steps=timeline.take(count))
    assert isinstance(event, Finished)
    return dataclasses.replace(event, steps=timeline.take(len(event.token_ids)))
