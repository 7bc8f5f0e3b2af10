"""Structured output on the embedded engine (issue 20): what a JSON schema costs, side by side in one run.

1. Throughput: the same engine serves N concurrent requests (N = 1 and 8) without and with a JSON schema,
   in ``--rounds`` pairs of loads, alternating which side goes first; each request is cut at ``--tokens``
   (the schema's minimum reply is longer than that, the plain prompts ask for essays), so both sides decode
   the same number of tokens. Aggregate tokens/s and the ratios with/without are printed (target ≥ 0.9).
   ``--profile`` also times the mask path of every constrained token and every decode step in the same run:
   the share of a step the masks take bounds what they can cost, whatever the machine's load.
2. Mechanisms (``--mechanisms``): one greedy sequence through the low-level API, for each schema: compile
   time and the extra cost per token of llama.cpp's grammar sampler (GBNF from llama-cpp-python's converter)
   and of llguidance's mask (``engines/llguidance_json``), and whether the reply is valid.

    python benchmarks/structured.py [--streams 1,8] [--tokens 96] [--rounds 8] [--profile] [--mechanisms]

Not a test: numbers vary with the machine and its load; compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

from tokenrelay.engines.base import JSONConstraint, SamplingParams
from tokenrelay.engines.llamacpp import LlamaCppEngine

TOPICS = ["tea", "bridges", "the sky", "honey bees", "compilers", "the water cycle", "volcanoes", "vaccines"]
# At least 40 strings: always longer than --tokens, so every constrained stream is cut there too.
LONG = {"type": "array", "items": {"type": "string", "maxLength": 40}, "minItems": 40}


def chat(i: int, json_reply: bool) -> list[dict[str, str]]:
    topic = TOPICS[i % len(TOPICS)]
    if json_reply:
        return [{"role": "user", "content": f"List facts about {topic} as a JSON array of strings."}]
    return [{"role": "user", "content": f"Write a long, detailed essay about {topic}."}]


async def one(engine: LlamaCppEngine, i: int, params: SamplingParams) -> int:
    prompt = chat(i, params.constraint is not None)
    ids = engine.prompt_ids(prompt)
    return sum([len(step) async for step in engine.generate(prompt, params, prompt_ids=ids)])  # type: ignore[arg-type]


class Load:
    """What one load of N streams took: tokens, wall seconds, and this process's CPU seconds (all threads).
    CPU time is the noise-resistant one on a shared machine: another process's work lengthens the wall
    clock of a step but not the CPU time this process spends in it."""

    def __init__(self, tokens: int, wall: float, cpu: float) -> None:
        self.tokens, self.wall, self.cpu = tokens, wall, cpu


async def load(engine: LlamaCppEngine, n: int, params: SamplingParams) -> Load:
    started, cpu = time.perf_counter(), time.process_time()
    tokens = await asyncio.gather(*(one(engine, i, params) for i in range(n)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    # Both sides must decode the same work: every stream cut at max_tokens (none ended early).
    if tokens != [params.max_tokens] * n:
        raise SystemExit(f"a stream ended before {params.max_tokens} tokens: {tokens}")
    return Load(sum(tokens), wall, cpu)


class MaskClock:
    """Times the constrained path of every sampled token in the engine's worker (benchmark-only wrappers
    around ``JSONMask``'s methods): llguidance's mask computation, applying it to the logits row, consuming
    the sampled token; and every ``llama_decode`` step. Wrapping costs two clock reads per call."""

    def __init__(self) -> None:
        from tokenrelay.engines import _llama_native, llguidance_json

        self.compute: list[float] = []
        self.apply: list[float] = []
        self.accept: list[float] = []
        self.steps: list[tuple[int, float]] = []  # (sequences sampled, seconds) per llama_decode
        mask_cls, native_cls = llguidance_json.JSONMask, _llama_native.NativeModel
        clock = self

        def timed(method: Any, into: list[float]) -> Any:
            def wrapper(*args: Any) -> Any:
                t0 = time.perf_counter()
                result = method(*args)
                into.append(time.perf_counter() - t0)
                return result

            return wrapper

        decode = native_cls.decode

        def timed_decode(native: Any, entries: Any) -> list[int]:
            t0 = time.perf_counter()
            rows: list[int] = decode(native, entries)
            clock.steps.append((sum(r >= 0 for r in rows), time.perf_counter() - t0))
            return rows

        mask_cls.compute = timed(mask_cls.compute, self.compute)  # type: ignore[method-assign]
        mask_cls.restrict = timed(mask_cls.restrict, self.apply)  # type: ignore[method-assign]
        mask_cls.accept = timed(mask_cls.accept, self.accept)  # type: ignore[method-assign]
        native_cls.decode = timed_decode  # type: ignore[method-assign]

    def clear(self) -> None:
        for series in (self.compute, self.apply, self.accept, self.steps):
            series.clear()


def quartiles(values: list[float]) -> str:
    q1, q2, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
    return f"{q2:.2f} [{q1:.2f}–{q3:.2f}]"


def throughput(args: argparse.Namespace) -> None:
    streams = [int(s) for s in args.streams.split(",")]
    engine = LlamaCppEngine.load(n_parallel=max(streams), n_ctx=1024, n_threads=args.threads)
    plain = SamplingParams(max_tokens=args.tokens, temperature=0.0)
    constrained = SamplingParams(
        max_tokens=args.tokens, temperature=0.0, constraint=JSONConstraint(json.dumps(LONG))
    )
    engine.check_constraint(constrained.constraint)  # type: ignore[arg-type]  # compiled before timing
    clock = MaskClock() if args.profile else None

    async def run() -> None:
        for n in streams:  # warm-up: every sequence used once on both sides
            await load(engine, n, plain)
            await load(engine, n, constrained)
        print(
            f"{args.tokens} tokens a stream, temperature 0, {args.rounds} pairs of loads in alternating order "
            "(plain json, json plain, ...): median tok/s; json/plain ratio per pair as median [quartiles] "
            "of wall time and of this process's CPU time; best: best json load / best plain load (noise only "
            "slows a load down)"
        )
        print(
            f"{'streams':>7} {'plain tok/s':>11} {'json tok/s':>10} {'wall ratio':>18} "
            f"{'CPU ratio':>18} {'best':>5} {'load':>5}"
        )
        for n in streams:
            walls, cpus, plains, jsons = [], [], [], []
            if clock:
                clock.clear()
            for i in range(args.rounds):
                order = (plain, constrained) if i % 2 == 0 else (constrained, plain)
                got = {id(p): await load(engine, n, p) for p in order}
                p, j = got[id(plain)], got[id(constrained)]
                plains.append(p.tokens / p.wall)
                jsons.append(j.tokens / j.wall)
                walls.append(p.wall / j.wall)
                cpus.append(p.cpu / j.cpu)
            print(
                f"{n:>7} {statistics.median(plains):>11.1f} {statistics.median(jsons):>10.1f} "
                f"{quartiles(walls):>18} {quartiles(cpus):>18} {max(jsons) / max(plains):>5.2f} "
                f"{os.getloadavg()[0]:>5.1f}"
            )
            if clock:
                print_profile(clock, n)
        await engine.aclose()

    asyncio.run(run())


def print_profile(clock: MaskClock, n: int) -> None:
    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1e3:.3f}/{statistics.mean(values) * 1e3:.3f}"

    full = [s for k, s in clock.steps if k == n]  # steps that sampled every stream
    mask_per_token = (
        statistics.mean(clock.compute) + statistics.mean(clock.apply) + statistics.mean(clock.accept)
    )
    step = statistics.mean(full) if full else float("nan")
    print(
        f"        mask path per token, ms median/mean: compute {ms(clock.compute)}, apply {ms(clock.apply)}, "
        f"accept {ms(clock.accept)} ({len(clock.compute)} tokens); llama_decode of {n} tokens: "
        f"{ms(full)} ms; {n} masks / step: {n * mask_per_token / step:.1%} "
        f"(ratio if only that: {step / (step + n * mask_per_token):.3f})"
    )


SCHEMAS: dict[str, Any] = {
    "person": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"}},
        "required": ["name", "age", "city"],
        "additionalProperties": False,
    },
    "any object": {"type": "object"},
    "nested arrays": {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "title": {"type": "string", "maxLength": 30},
                        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
                    },
                    "required": ["title", "tags"],
                    "additionalProperties": False,
                },
                "minItems": 2,
                "maxItems": 3,
            }
        },
        "required": ["items"],
        "additionalProperties": False,
    },
    "enum of 20,000": {"enum": [f"value-{i}" for i in range(20000)]},
}


def mechanisms(args: argparse.Namespace) -> None:
    import jsonschema
    import llama_cpp as lc
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    from tokenrelay.engines._llama_native import BatchEntry, NativeModel, Sampler
    from tokenrelay.engines.llamacpp import resolve_model_path
    from tokenrelay.engines.llguidance_json import JSONGrammars

    native = NativeModel.load(resolve_model_path("smollm2"), n_threads=2, n_parallel=1, n_ctx_seq=1024)
    grammars = JSONGrammars(native.vocab, native.n_vocab)
    started = time.perf_counter()
    grammars.check(JSONConstraint())
    print(f"llguidance tokenizer from the vocabulary, once per engine: {time.perf_counter() - started:.2f} s")
    template = Jinja2ChatFormatter(
        template=native.metadata["tokenizer.chat_template"],
        eos_token=native.token_text(native.eos),
        bos_token=native.token_text(native.bos),
    )
    rendered = template(messages=[{"role": "user", "content": "Describe a person as JSON."}]).prompt
    prompt = native.tokenize(rendered.encode(), add_bos=False, special=True)
    stops = {native.eos, native.eot}

    def run(kind: str, schema: Any) -> tuple[float, list[float], str, bool]:
        started = time.perf_counter()
        mask = None
        sampler = Sampler(0.0, 1.0, None)
        if kind == "llguidance":
            mask = grammars.mask(JSONConstraint(json.dumps(schema)))
            sampler = Sampler(0.0, 1.0, None, mask)
        elif kind == "grammar sampler":
            gbnf = json_schema_to_gbnf(json.dumps(schema))
            chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
            lc.llama_sampler_chain_add(
                chain, lc.llama_sampler_init_grammar(native.vocab, gbnf.encode(), b"root")
            )
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
            sampler.close()
            sampler._chain = chain
        compile_s = time.perf_counter() - started
        rows = native.decode([BatchEntry(t, p, 0, p == len(prompt) - 1) for p, t in enumerate(prompt)])
        row, pos, out, costs, ended = rows[-1], len(prompt), [], [], False
        for _ in range(args.mechanism_tokens):
            started = time.perf_counter()
            token = native.sample(sampler, row)
            costs.append(time.perf_counter() - started)
            if token in stops:
                ended = True
                break
            out.append(token)
            row = native.decode([BatchEntry(token, pos, 0, True)])[0]
            pos += 1
        native.forget(0)
        sampler.close()
        text = b"".join(bytes(native._model.detokenize([t], special=False)) for t in out).decode()
        return compile_s, costs, text, ended

    _, base, _, _ = run("none", None)
    plain = statistics.median(base)
    print(f"sampling alone (greedy): {plain * 1e3:.3f} ms/token; cost added per token by each mechanism:")
    print(
        f"{'schema':>15} {'mechanism':>16} {'compile ms':>10} {'median ms':>9} {'mean ms':>8} {'tokens':>6}  reply"
    )
    for name, schema in SCHEMAS.items():
        for kind in ("llguidance", "grammar sampler"):
            if kind == "grammar sampler" and name.startswith("enum") and not args.slow:
                print(f"{name:>15} {kind:>16}  skipped (--slow runs it; llama-server took 477 s)")
                continue
            compile_s, costs, text, ended = run(kind, schema)
            extra = [c - plain for c in costs]
            verdict = "cut"
            if ended:
                try:
                    jsonschema.validate(json.loads(text), schema)
                    verdict = "valid"
                except (ValueError, jsonschema.ValidationError):
                    verdict = "INVALID"
            print(
                f"{name:>15} {kind:>16} {compile_s * 1e3:>10.1f} {statistics.median(extra) * 1e3:>9.3f} "
                f"{statistics.mean(extra) * 1e3:>8.3f} {len(costs):>6}  {verdict} {text[:48]!r}"
            )
    native.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="1,8")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=8, help="rounds of each side (ABBA order)")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="llama.cpp threads (default: the engine's); 1 avoids its spinning barrier on a busy machine",
    )
    ap.add_argument("--profile", action="store_true", help="time the mask path and the decode steps")
    ap.add_argument("--mechanisms", action="store_true", help="compare llguidance and the grammar sampler")
    ap.add_argument("--mechanism-tokens", type=int, default=80)
    ap.add_argument("--slow", action="store_true", help="also the grammar sampler on the 20,000-value enum")
    ap.add_argument("--no-throughput", action="store_true")
    args = ap.parse_args()
    if not args.no_throughput:
        throughput(args)
    if args.mechanisms:
        mechanisms(args)


if __name__ == "__main__":
    main()
