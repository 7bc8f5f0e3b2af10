"""JSON constraints for the llama.cpp engine: a schema compiled by llguidance, one token mask per step (issue 20).

Why llguidance, measured on this project's 2-core VM with SmolLM2-135M (``benchmarks/structured.py``
prints the comparison; figures in benchmarks/README.md):

- llama.cpp's own grammar sampler (``llama_sampler_init_grammar``, GBNF from llama-cpp-python's
  ``json_schema_to_gbnf``) checks every candidate of the 49,152-token vocabulary against the grammar's stacks
  at each step: 23–36 ms a token, two to three times the decode step itself (~10 ms), and llama-server needed
  477 s for a 20,000-value enum;
- llguidance (Rust, no Python dependencies, a llama.cpp vocabulary bridge) computes the mask with a lazy
  lexer and a token trie: about 0.5 ms a token (median), 0.2 s to compile the 20,000-value enum, and its work
  per compile and per step is bounded by fuel limits (``LLParserLimits``), so a hostile schema ends in an
  error, not a hang;
- xgrammar requires torch and triton (``pip show xgrammar``): gigabytes for an engine whose point is a
  100 MB model on a CPU. It is what vLLM uses, and is exercised there.

The mask is applied to the sequence's own row of logits (``llama_get_logits_ith``: disallowed tokens set to
-inf) just before that request's sampler chain runs, so temperature, top_p and the seed work as usual, and the
sampled token is then consumed by the sequence's matcher. Each sequence has its own matcher: constrained and
unconstrained requests share every decode step, and a request without a constraint runs exactly the code it
ran before (no mask, no copy). The end of sequence is allowed only where the JSON is complete; once it is
complete nothing else is (the grammar has no trailing whitespace), so the reply ends there, with ``"stop"``;
a reply cut by ``max_tokens`` stays cut ("length").

Numbers are bounded as llama.cpp's JSON grammar bounds them (issue 33: an unbounded digit loop wrote a
population of 1,000 zeros): a schema's unbounded ``integer`` gets ``±(2^53 - 1)`` and ``number`` ``±10^16``
(``_json_grammar.bound_numbers``, an exact range in llguidance), and the mask caps every run of digits outside
a string at 16 (``_json_grammar.DigitRuns``: a fraction, an exponent, the numbers of a ``json_object``, which
no schema keyword bounds), unless the grammar allows nothing else.

The layout (whitespace between the JSON's tokens) is ``_json_grammar.LAYOUT``; see there for what each allows
and why this one was kept (measured by ``benchmarks/constrained_finish.py``).

Where the mask runs: in the worker thread, after each ``llama_decode``, one constrained sequence after the
other (compute the bitmask, restrict the row, sample, consume). ``benchmarks/structured.py --profile`` times it
inside the throughput run: about 0.2–0.5 ms a token (compute, with the GIL dropped, and the row update in
numpy), 5 % of a quiet step at 1 stream (~10 ms) and 3.4 % at 8 (~55 ms a step), less on a busy machine; the
throughput with a schema was 0.96× / 1.05× of that without (benchmarks/README.md). Computing the next masks in parallel with the next ``llama_decode`` would hide at most that share, and
on 2 cores it would take a core from llama.cpp's own threads: not done.

Compiling happens off the worker thread: ``check`` at the server's intake (a thread pool) and ``matcher`` in
``generate`` (the default executor); compiled grammars are cached per constraint and each request gets a copy.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections import OrderedDict
from typing import Any

from tokenrelay._errors import EngineError, InvalidRequestError
from tokenrelay._json_fence import CLOSING, OPENINGS
from tokenrelay._json_grammar import DigitRuns, bound_numbers, layout_options
from tokenrelay.engines.base import JSONConstraint

__all__ = ["JSONGrammars", "JSONMask"]

# Bounds on what one schema may cost (llguidance's defaults, but a tenth of the lexer states: each is 1-2 KB,
# and a cached grammar keeps its own).
_MAX_LEXER_STATES = 25_000
_CACHE = 32  # compiled grammars kept (per engine)
_STRICT = {
    "lenient": False,  # an unimplemented keyword is an error, never ignored (a schema's x-guidance cannot
    "coerce_one_of": False,  # turn these on: overrides win)
}
_TOOL_CALL = b"<tool_call>"  # where a tool-call grammar's JSON begins (the prose before it is not JSON)


class _Digits:
    """What the digit cap needs to know of a vocabulary: each token's bytes, and how many digits it starts
    with (``lead``), so the tokens that would make a run of digits too long are found in one numpy compare."""

    def __init__(self, pieces: list[bytes]) -> None:
        import numpy as np

        self.pieces = pieces
        self.lead = np.array([len(p) - len(p.lstrip(b"0123456789")) for p in pieces], dtype=np.int16)
        self.longest = int(self.lead.max()) if pieces else 0


class JSONMask:
    """One sequence's constraint: masks its row of logits before sampling, consumes each sampled token.

    Besides the grammar's mask, a run of digits outside a string is capped at ``MAX_DIGITS`` (16, as
    llama.cpp's JSON grammar caps an integral part, a fraction and an exponent): a token that would make it
    longer is masked too, unless the grammar allows nothing else (a schema whose ``minimum`` has 17 digits)."""

    __slots__ = ("_bits", "_digits", "_matcher", "_n_vocab", "_runs", "_words")

    def __init__(self, matcher: Any, n_vocab: int, digits: _Digits, runs: DigitRuns) -> None:
        import numpy as np

        self._matcher = matcher
        self._n_vocab = n_vocab
        self._digits = digits
        self._runs = runs
        self._words = np.zeros((n_vocab + 31) // 32, dtype=np.int32)
        self._bits = self._words.view(np.uint8)

    def apply(self, ctx: Any, row: int) -> None:
        """Set the logits of every token the JSON cannot continue with to -inf (llama.cpp's row ``row``)."""
        self.compute()
        self.restrict(ctx, row)

    def compute(self) -> None:
        """llguidance's bitmask of the allowed tokens (one bit each) for the sequence's next token."""
        matcher = self._matcher
        matcher.unsafe_compute_mask_ptr(self._words.ctypes.data, self._words.nbytes)  # drops the GIL
        if matcher.is_error():
            raise EngineError(f"the JSON constraint failed: {matcher.get_error()}")

    def restrict(self, ctx: Any, row: int) -> None:
        """Apply the computed bitmask to llama.cpp's logits row ``row``."""
        import llama_cpp as lc
        import numpy as np

        allowed = np.unpackbits(self._bits, count=self._n_vocab, bitorder="little").view(bool)
        room = self._runs.room
        if room is not None and room < self._digits.longest:
            capped = allowed & (self._digits.lead <= room)
            if capped.any():
                allowed = capped
        logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, row), shape=(self._n_vocab,))
        logits[~allowed] = -np.inf

    def accept(self, token: int) -> None:
        if not self._matcher.consume_token(token):
            raise EngineError(f"the JSON constraint refused token {token}: {self._matcher.get_error()}")
        if 0 <= token < len(self._digits.pieces):
            self._runs.feed(self._digits.pieces[token])


class JSONGrammars:
    """Compiles constraints for one llama.cpp vocabulary; thread-safe. The llguidance tokenizer (about a
    second to build from the vocabulary) is made on the first constraint, so an engine that never sees one
    never pays for it."""

    def __init__(self, vocab: Any, n_vocab: int) -> None:
        self._vocab = vocab
        self._n_vocab = n_vocab
        self._tokenizer: Any = None
        self._digits: _Digits | None = None
        self._lock = threading.Lock()
        # Keyed by the constraint, or by a grammar's text (``SamplingParams.grammar``: tool calls, issue 21).
        self._cache: OrderedDict[JSONConstraint | str, Any] = OrderedDict()

    @property
    def ready(self) -> bool:
        """Whether the llguidance tokenizer was built (a constraint was compiled)."""
        return self._tokenizer is not None

    def check(self, constraint: JSONConstraint | str) -> None:
        """Compile ``constraint`` (or find it compiled); ``InvalidRequestError`` if llguidance refuses it. A
        ``str`` is a grammar in llguidance's Lark dialect (``SamplingParams.grammar``: tool calls)."""
        self._template(constraint)

    def mask(self, constraint: JSONConstraint | str) -> JSONMask:
        """A fresh mask for one sequence (compiles on a cache miss: call it off the decode thread)."""
        matcher = self._template(constraint).deep_copy()
        runs = DigitRuns(_TOOL_CALL if isinstance(constraint, str) else b"")
        return JSONMask(matcher, self._n_vocab, self._digit_table(), runs)

    def _digit_table(self) -> _Digits:
        with self._lock:
            if self._digits is None:
                tokenizer = self._tokenizer  # built by the first compile (_template), before any mask
                pieces = [tokenizer.decode_bytes([t]) for t in range(self._n_vocab)]
                self._digits = _Digits(pieces)
            return self._digits

    def _template(self, constraint: JSONConstraint | str) -> Any:
        with self._lock:
            cached = self._cache.get(constraint)
            if cached is not None:
                self._cache.move_to_end(constraint)
                return cached
        matcher = self._compile(constraint)
        with self._lock:
            self._cache[constraint] = matcher
            while len(self._cache) > _CACHE:
                self._cache.popitem(last=False)
        return matcher

    def _llg_tokenizer(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                from llguidance.llamacpp import lltokenizer_from_vocab

                # llguidance's bridge calls llama_token_get_attr, which llama-cpp-python 0.3.36 marks as
                # deprecated (same function, new name): that warning is theirs to fix, not an error here.
                with warnings.catch_warnings():
                    warnings.filterwarnings(
                        "ignore", "llama_token_get_attr is deprecated", DeprecationWarning
                    )
                    self._tokenizer = lltokenizer_from_vocab(self._vocab, n_vocab=self._n_vocab)
            return self._tokenizer

    def _compile(self, constraint: JSONConstraint | str) -> Any:
        import llguidance

        tokenizer = self._llg_tokenizer()
        if isinstance(constraint, str):  # a tool-call grammar: its JSON options are its own (_tools)
            param = "tools"
            try:
                grammar = llguidance.LLMatcher.grammar_from_lark(constraint)
            except ValueError as exc:
                raise InvalidRequestError(f"{param}: {exc}", param=param) from exc
        else:
            if constraint.schema is None:  # json_object: any JSON object
                schema, param = '{"type":"object"}', "response_format"
            else:
                schema = bound_numbers(_without_guidance_options(constraint.schema))
                param = "response_format.json_schema.schema"
            try:
                grammar = _fenced(schema)
            except ValueError as exc:
                raise InvalidRequestError(f"{param}: {exc}", param=param) from exc
        # The matcher is built here, not just validated: its construction compiles the lexer (bounded by the
        # limits), and the cache hands out copies of it.
        matcher = llguidance.LLMatcher(
            tokenizer,
            grammar,
            log_level=0,
            limits=llguidance.LLParserLimits(max_lexer_states=_MAX_LEXER_STATES),
        )
        if matcher.is_error():
            raise InvalidRequestError(
                f"{param}: this server cannot enforce the schema: {matcher.get_error()}", param=param
            )
        return matcher


def _fenced(schema: str) -> str:
    """The JSON of ``schema`` in the engine's layout, with an optional Markdown fence around it (the model's
    own way to open a JSON answer: ``_json_fence``, which keeps the fence out of the text sent)."""
    import llguidance

    data = json.loads(schema)
    if not isinstance(data, dict):  # a boolean schema: no options to add
        data = {"allOf": [data]}
    data["x-guidance"] = {**layout_options(), **_STRICT}
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    openings = " | ".join(json.dumps(f) for f in OPENINGS)
    lark = f"start: FENCE? body CLOSE?\nFENCE: {openings}\nCLOSE: {json.dumps(CLOSING)}\nbody: %json {body}\n"
    grammar: str = llguidance.grammar_from("lark", lark)
    return grammar


def _without_guidance_options(schema: str) -> str:
    """The schema without llguidance's own ``x-guidance`` options: the engine picks them (``_OPTIONS``)."""
    if '"x-guidance"' not in schema:
        return schema
    data = json.loads(schema)
    if isinstance(data, dict):
        data.pop("x-guidance", None)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
