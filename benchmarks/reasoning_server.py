"""A reasoning reply through the server's token path, with and without the reasoning splitter (issue 31 §5).

The same replayed reply (a ``<think>`` section of ~60 % of its tokens, then the answer; multilingual text,
SmolLM2's tokens) streamed by two apps in one process, rounds alternating: one reads it with
``--reasoning-parser qwen3`` (reasoning in ``delta.reasoning_content``, the answer in ``delta.content``), the
other with no parser (all of it ``delta.content``, today's behaviour). The path is ``server_path.py``'s:
uvicorn's HTTP protocol over a sink transport, no kernel, so the figure is steady on a shared machine.

Reported: CPU µs per token of each (median of rounds) and the ratio (target ≤ 1.05×) two ways: the median of
the rounds' ratios, and the ratio of each one's best round (noise on a shared machine only adds time); and
bytes per token.

    python benchmarks/reasoning_server.py [--streams 32] [--tokens 256] [--rounds 5]

Not a test: compare runs on one machine, one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import uvicorn  # noqa: E402
import uvloop  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

from server_path import batch  # noqa: E402
from tokenrelay.engines.replay import ReplayEngine  # noqa: E402
from tokenrelay.server.app import ServerConfig, create_app  # noqa: E402
from tokenrelay.server.run import guarded_protocol  # noqa: E402
from tokenrelay.tokenizers import load_tokenizer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from tiny_tokenizers import corpus_text

    tokenizer = load_tokenizer("smollm2")
    text = corpus_text()
    reasoning_ids = int(args.tokens * 0.6)
    thinking = tokenizer.decode(tokenizer.encode(text * 4)[:reasoning_ids])
    reply = f"<think>\n{thinking}\n</think>\n\n{text * 4}"
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    protocol_class = guarded_protocol("httptools", 10.0)
    state = ServerState()
    configs: dict[str, Any] = {}
    for name, parser_name in (("no parser", "none"), ("reasoning parser", "qwen3")):
        limits = ServerConfig(max_active=8192, max_queued=8192, tune_gc=False, reasoning_parser=parser_name)
        app = create_app(ReplayEngine(tokenizer, reply, rate=None), limits)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        config.load()
        configs[name] = config

    def timed(config: Any) -> tuple[float, int]:
        start = time.process_time()
        written = loop.run_until_complete(
            batch(protocol_class, config, state, args.streams, args.requests, args.tokens)
        )
        return time.process_time() - start, written

    for config in configs.values():
        timed(config)  # warm
    gc.collect()
    gc.freeze()
    tokens = args.streams * args.requests * args.tokens
    per_token: dict[str, list[float]] = {name: [] for name in configs}
    per_byte: dict[str, float] = {}
    for r in range(args.rounds):
        order = list(configs) if r % 2 == 0 else list(reversed(configs))
        for name in order:
            cpu, written = timed(configs[name])
            per_token[name].append(cpu / tokens * 1e6)
            per_byte[name] = written / tokens
    for name, values in per_token.items():
        print(
            f"{name:>16}: {statistics.median(values):.1f} µs/token (rounds {min(values):.1f}–{max(values):.1f}), "
            f"{per_byte[name]:.0f} bytes/token"
        )
    ratios = [a / b for a, b in zip(per_token["reasoning parser"], per_token["no parser"], strict=True)]
    # The best round of each: on a shared machine noise only ever adds CPU time (another process, a cold
    # cache), so the fastest of many rounds is each one's own cost most nearly (as timeit reports a minimum).
    best = min(per_token["reasoning parser"]) / min(per_token["no parser"])
    print(
        f"reasoning parser / no parser, per token: median of rounds {statistics.median(ratios):.3f} "
        f"(rounds {min(ratios):.3f}–{max(ratios):.3f}), best round of each {best:.3f}; target ≤ 1.05"
    )


if __name__ == "__main__":
    main()
