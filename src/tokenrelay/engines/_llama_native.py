"""llama.cpp's low-level API, wrapped just enough for a continuous-batching engine.

``llama_cpp.Llama`` runs one sequence per context; serving N chats at once needs what ``llama-server`` uses:
one context whose KV cache holds N sequences (``n_seq_max``, one stream per sequence: ``kv_unified`` off, so a
sequence's attention never scans the others' cells), one ``llama_batch`` per step carrying each sequence's
tokens at their positions, one ``llama_decode`` for all of them, and a sampler per sequence reading its own row
of logits. This module is that and nothing more; the scheduling lives in ``engines/_batching.py`` and the
threads and asyncio in ``engines/llamacpp.py``.

Every call here blocks (``llama_decode`` for milliseconds); ctypes releases the GIL around the C calls, so the
event loop runs while a step computes. The object is not thread-safe: one worker thread owns it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from tokenrelay._errors import ConfigError, EngineError
from tokenrelay.engines._batching import BatchEntry

__all__ = ["BatchEntry", "GraphCounter", "Mask", "NativeModel", "Sampler"]

DEFAULT_SEED = 0xFFFFFFFF  # llama.cpp's LLAMA_DEFAULT_SEED: "draw a random seed", as the OpenAI API does


class Mask(Protocol):
    """What constrains a request's tokens (``engines/llguidance_json.JSONMask``): it edits the request's row of
    logits before the sampler chain runs, and is told the token sampled."""

    def apply(self, ctx: Any, row: int) -> None: ...

    def accept(self, token: int) -> None: ...


class Sampler:
    """A per-request llama.cpp sampler chain; ``temperature == 0`` is greedy. ``mask``, when given, restricts
    the tokens (structured output); a request without one runs the chain alone."""

    def __init__(self, temperature: float, top_p: float, seed: int | None, mask: Mask | None = None) -> None:
        import llama_cpp as lc

        self._mask = mask
        # OpenAI semantics: only temperature and top_p shape the distribution; the order (top-p, then
        # temperature, then the draw) is llama-cpp-python's own, so a seeded reply matches Llama.generate's.
        chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        if temperature == 0.0:
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
        else:
            if top_p < 1.0:
                lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_p(top_p, 1))
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_temp(temperature))
            lc.llama_sampler_chain_add(
                chain, lc.llama_sampler_init_dist(DEFAULT_SEED if seed is None else seed)
            )
        self._chain: Any = chain

    def sample(self, ctx: Any, row: int) -> int:
        import llama_cpp as lc

        mask = self._mask
        if mask is None:
            # llama_sampler_sample also "accepts" the token into the chain's state (a no-op for these samplers).
            return int(lc.llama_sampler_sample(self._chain, ctx, row))
        mask.apply(ctx, row)
        token = int(lc.llama_sampler_sample(self._chain, ctx, row))
        mask.accept(token)
        return token

    def close(self) -> None:
        import llama_cpp as lc

        if self._chain is not None:
            lc.llama_sampler_free(self._chain)
            self._chain = None


class _TensorHead(ctypes.Structure):
    """``struct ggml_tensor`` up to its name (ggml.h as vendored by llama-cpp-python 0.3.36), to read which node
    the scheduler asks about."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
    ]


class GraphCounter:
    """Counts graph computes (one per ubatch) through llama.cpp's eval callback, which the scheduler asks about
    every node of every graph it computes: the node named ``result_norm`` is in each graph once. For
    measurements only (``benchmarks/engine_steps.py``): a Python call per node costs milliseconds a step."""

    def __init__(self) -> None:
        import llama_cpp as lc

        self.computes = 0

        def on_node(tensor: int, ask: bool, _data: int) -> bool:
            if ask and _TensorHead.from_address(tensor).name == b"result_norm":
                self.computes += 1
            return False  # no node's data is wanted: the graph runs unsplit

        self.callback = lc.ggml_backend_sched_eval_callback(on_node)


class NativeModel:
    """A GGUF model and one multi-sequence context. Build it with :meth:`load`."""

    def __init__(self, model: Any, ctx: Any, *, n_parallel: int, n_batch: int) -> None:
        import llama_cpp as lc

        self._model = model  # llama_cpp._internals.LlamaModel (owns the llama_model and its vocab)
        self._ctx: Any = ctx
        self._mem = lc.llama_get_memory(ctx)
        self.n_parallel = n_parallel
        self.n_batch = min(n_batch, int(lc.llama_n_batch(ctx)))
        """Most tokens one step may carry (llama.cpp caps the asked-for size at the context size)."""
        self.n_ctx_seq = int(lc.llama_n_ctx_seq(ctx))
        """Cells each sequence may fill: prompt plus reply."""
        self.n_vocab = int(model.n_vocab())
        """Token ids run from 0 to ``n_vocab - 1``."""
        self._batch = lc.llama_batch_init(n_batch, 0, 1)
        self.metadata: dict[str, str] = model.metadata()
        self.graph_counter: GraphCounter | None = None

    @classmethod
    def load(
        cls,
        path: Path,
        *,
        n_threads: int,
        n_parallel: int,
        n_ctx_seq: int,
        n_batch: int = 512,
        use_extra_bufts: bool = True,
        graph_counter: GraphCounter | None = None,
        kv_unified: bool = False,
    ) -> NativeModel:
        """Load ``path`` with room for ``n_parallel`` sequences of ``n_ctx_seq`` tokens each; a
        ``graph_counter`` counts the graphs llama.cpp computes (measurements only: it slows every step);
        ``kv_unified`` puts every sequence in one KV buffer (measurements only, see below)."""
        import llama_cpp as lc
        from llama_cpp._internals import LlamaModel
        from llama_cpp._logger import set_verbose

        set_verbose(False)  # llama.cpp's own log lines stay off (errors still print); progress is ours
        lc.llama_backend_init()
        mparams = lc.llama_model_default_params()
        mparams.use_extra_bufts = use_extra_bufts
        try:
            model = LlamaModel(path_model=str(path), params=mparams, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            raise ConfigError(f"llama.cpp could not load {path}: {exc}") from exc
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = n_ctx_seq * n_parallel
        cparams.n_seq_max = n_parallel
        # One KV stream per sequence (kv_unified off): a sequence's attention reads only its own cells and its
        # room is fixed (n_ctx_seq), so a full cache is a "length" finish for that request alone. A unified
        # buffer (llama-server's default for slots) measured ~15 % faster at 8 sequences here, but greedy
        # replies then differed batched vs alone (the tests compare them) and one long reply could fill the
        # cache for everybody.
        cparams.kv_unified = kv_unified
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        cparams.no_perf = True
        # Flash attention on, as llama-server's "auto" picks on CPU: 10.4 against 13.5 ms a step for one
        # sequence here, 58 against 66 ms for eight. (llama-cpp-python's Llama defaults to off; the tests' oracle
        # is a Llama with flash_attn=True, whose logits then match ours to the last bit.)
        cparams.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED
        if graph_counter is not None:
            cparams.cb_eval = graph_counter.callback
        ctx = lc.llama_init_from_model(model.model, cparams)
        if ctx is None:
            model.close()  # type: ignore[no-untyped-call,unused-ignore]  # Any without llama_cpp (make lint)
            raise ConfigError(
                f"llama.cpp could not make a context of {n_parallel} × {n_ctx_seq} tokens for {path}"
            )
        native = cls(model, ctx, n_parallel=n_parallel, n_batch=n_batch)
        native.graph_counter = graph_counter  # its callback must live as long as the context
        return native

    # -- vocabulary ------------------------------------------------------------------------------------------

    def tokenize(self, text: bytes, *, add_bos: bool, special: bool) -> list[int]:
        return list(self._model.tokenize(text, add_bos, special))

    @property
    def vocab(self) -> Any:
        """llama.cpp's ``llama_vocab`` pointer (the JSON constraints read the vocabulary from it)."""
        import llama_cpp as lc

        return lc.llama_model_get_vocab(self._model.model)

    def token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return bytes(self._model.detokenize([token], special=True)).decode("utf-8", errors="replace")

    @property
    def bos(self) -> int:
        return int(self._model.token_bos())

    @property
    def eos(self) -> int:
        return int(self._model.token_eos())

    @property
    def eot(self) -> int:
        return int(self._model.token_eot())

    # -- decoding --------------------------------------------------------------------------------------------

    def decode(self, entries: Sequence[BatchEntry]) -> list[int]:
        """One ``llama_decode`` over ``entries`` (at most ``n_batch``); returns the logits row of each entry
        that asked for logits, in order (``-1`` for the others)."""
        import llama_cpp as lc

        if not 0 < len(entries) <= self.n_batch:
            raise ValueError(f"a step holds 1..{self.n_batch} tokens, got {len(entries)}")
        batch = self._batch
        rows: list[int] = []
        token, pos, n_seq, seq_ids, logits = (
            batch.token,
            batch.pos,
            batch.n_seq_id,
            batch.seq_id,
            batch.logits,
        )
        for i, entry in enumerate(entries):
            token[i] = entry.token
            pos[i] = entry.pos
            n_seq[i] = 1
            seq_ids[i][0] = entry.seq
            logits[i] = entry.logits
            rows.append(i if entry.logits else -1)
        batch.n_tokens = len(entries)
        status = lc.llama_decode(self._ctx, batch)
        if status != 0:
            raise EngineError(f"llama_decode failed with status {status} on a step of {len(entries)} tokens")
        return rows

    @property
    def graphs_reused(self) -> int:
        """Graph computes that reused the previous step's graph (llama.cpp's ``n_reused`` perf counter)."""
        import llama_cpp as lc

        return int(lc.llama_perf_context(self._ctx).n_reused)

    def sample(self, sampler: Sampler, row: int) -> int:
        return sampler.sample(self._ctx, row)

    def forget(self, seq: int, *, start: int = 0) -> bool:
        """Free the KV cells of ``seq`` from position ``start`` on (all of them by default), so the next
        request reads its prompt into the sequence from there. False when the memory cannot drop a tail (a
        recurrent model's state is all or nothing): then nothing was freed."""
        import llama_cpp as lc

        return bool(lc.llama_memory_seq_rm(self._mem, seq, start, -1))

    def copy(self, source: int, seq: int) -> None:
        """Make ``seq``'s cells a copy of ``source``'s (all of them; trim with :meth:`forget`). With one KV
        stream per sequence the data moves at the start of the next ``llama_decode`` (a memory copy of the
        stream); until then ``source``'s cells must not change, which holds between steps."""
        import llama_cpp as lc

        lc.llama_memory_seq_cp(self._mem, source, seq, -1, -1)

    def self_test(self) -> None:
        """Decode as the server will: a multi-token prompt, then steps batching every sequence at once."""
        ids = self.tokenize(b"The quick brown fox jumps over the lazy dog. " * 3, add_bos=True, special=False)
        sampler = Sampler(0.0, 1.0, None)
        try:
            nexts = []
            for seq in range(
                self.n_parallel
            ):  # seq 0 reads the whole prompt in one step, the others 4 tokens
                prompt = ids if seq == 0 else ids[:4]
                rows = self.decode(
                    [BatchEntry(t, p, seq, p == len(prompt) - 1) for p, t in enumerate(prompt)]
                )
                nexts.append((self.sample(sampler, rows[-1]), len(prompt)))
            for _ in range(2):
                batch = [BatchEntry(token, pos, seq, True) for seq, (token, pos) in enumerate(nexts)]
                rows = self.decode(batch)
                nexts = [
                    (self.sample(sampler, row), pos + 1) for row, (_, pos) in zip(rows, nexts, strict=True)
                ]
        finally:
            sampler.close()
            for seq in range(self.n_parallel):
                self.forget(seq)

    def close(self) -> None:
        import llama_cpp as lc

        if self._ctx is not None:
            lc.llama_batch_free(self._batch)
            lc.llama_free(self._ctx)
            self._ctx = None
            self._model.close()
