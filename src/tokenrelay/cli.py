"""The ``tokenrelay`` command: one subcommand per function, registered in ``COMMANDS``.

To add a subcommand (``serve``, ``doctor``, ``bench``), write a ``configure(parser)`` that adds its options
and a ``run(args) -> int`` that does the work (import heavy modules inside ``run``, so ``tokenrelay --help``
stays fast), and append a ``Command`` to ``COMMANDS``. A ``TokenRelayError`` escaping ``run`` becomes a
one-line message on stderr and exit status 2.

``generate`` streams one reply through the whole pipeline (engine → detokenizer → stop matcher) to stdout as
UTF-8 whatever the locale, flushing every delta; timings and model-loading progress go to stderr, so stdout is
the reply alone. ``--json`` writes JSON Lines instead: one object per delta and a final summary.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tokenrelay._errors import TokenRelayError
from tokenrelay._stream import Finished, Timings
from tokenrelay.doctor import command as doctor_command

if TYPE_CHECKING:
    from tokenrelay.engines import Engine

__all__ = ["COMMANDS", "Command", "main"]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _ByteSink(Protocol):
    def write(self, data: bytes, /) -> int: ...

    def flush(self) -> None: ...


def _stdout_bytes() -> _ByteSink:
    # Write bytes, not text: a C/POSIX locale would otherwise turn every non-ASCII reply into an error.
    buffer: _ByteSink | None = getattr(sys.stdout, "buffer", None)
    return buffer if buffer is not None else _TextAsBytes()


class _TextAsBytes:
    """Fallback for a stdout replaced by a text-only stream (an IDE console, a test capture)."""

    def write(self, data: bytes) -> int:
        return sys.stdout.write(data.decode("utf-8"))

    def flush(self) -> None:
        sys.stdout.flush()


# -- generate ------------------------------------------------------------------------------------------------


def _add_engine_options(parser: argparse.ArgumentParser) -> None:
    """Options that pick and tune an engine: shared by ``generate`` and ``serve``."""
    parser.add_argument("--engine", choices=("llamacpp", "replay", "upstream", "vllm"), default="llamacpp")
    parser.add_argument(
        "--model",
        help="llamacpp: 'smollm2' (the default, built in) or a PATH.gguf; vllm: 'smollm2' or an HF model "
        "folder or id; upstream: the model to ask the replicas for (default: their /v1/models)",
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--n-ctx", type=int, default=2048, help="llamacpp: context size in tokens")
    parser.add_argument("--threads", type=int, default=None, help="llamacpp: CPU threads (default: all, ≤ 8)")
    replay = parser.add_argument_group("replay engine")
    replay.add_argument("--text-file", type=Path, help="text to replay (default: the prompt itself)")
    replay.add_argument("--rate", type=float, default=50.0, help="tokens per second; 0 = no delay")
    replay.add_argument("--jitter", type=float, default=0.0, help="fraction each interval may vary by")
    replay.add_argument("--burst", type=int, default=1, help="ids released per step")
    replay.add_argument("--first-token-delay", type=float, default=0.0, help="seconds before the first step")
    replay.add_argument(
        "--tokenizer",
        help="replay, upstream: tokenizer name or file (default: smollm2; upstream: the model's)",
    )
    upstream = parser.add_argument_group("upstream engine (relay from running engine servers)")
    upstream.add_argument(
        "--upstream", action="append", default=[], metavar="URL", help="a replica's base URL (repeatable)"
    )
    upstream.add_argument(
        "--upstream-protocol",
        choices=("openai", "sglang", "tgi", "llamacpp"),
        default="openai",
        help="openai: vLLM, tokenrelay (return_token_ids); sglang: /generate; tgi: /generate_stream; "
        "llamacpp: llama-server (text deltas)",
    )
    upstream.add_argument("--upstream-api-key", help="sent to the replicas as 'Authorization: Bearer KEY'")
    upstream.add_argument("--health-interval", type=float, default=5.0, help="seconds between health checks")
    vllm = parser.add_argument_group("vllm engine (vLLM in-process; its options pass through)")
    vllm.add_argument("--tensor-parallel-size", type=int)
    vllm.add_argument("--pipeline-parallel-size", type=int)
    vllm.add_argument("--data-parallel-size", type=int)
    vllm.add_argument("--distributed-executor-backend", choices=("mp", "ray", "uni"))
    vllm.add_argument("--max-model-len", type=int)
    vllm.add_argument("--dtype")
    vllm.add_argument("--enforce-eager", action="store_true")


def _configure_generate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", help='the prompt; "-" reads it from stdin')
    parser.add_argument("--raw", action="store_true", help="send the prompt as plain text, no chat template")
    parser.add_argument("--system", help="a system message before the prompt (chat mode)")
    parser.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    parser.add_argument("--include-stop", action="store_true", help="keep the stop string in the output")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=1.0)
    _add_engine_options(parser)
    parser.add_argument("--json", action="store_true", help="JSON Lines on stdout: deltas, then a summary")


def _build_engine(args: argparse.Namespace) -> Engine:
    from tokenrelay.engines import LlamaCppEngine, ReplayEngine
    from tokenrelay.tokenizers import load_tokenizer

    if args.engine == "upstream":
        return _build_upstream(args)
    if args.engine == "vllm":
        from tokenrelay.engines.vllm import VLLMEngine

        options = {k: getattr(args, k) for k in VLLM_OPTIONS if getattr(args, k) not in (None, False)}
        return VLLMEngine.load(args.model or "smollm2", seed=args.seed, on_progress=_stderr, **options)
    if args.engine == "replay":
        # Bytes, then UTF-8: text mode would turn the file's CRLF line ends into LF before the replay.
        text = args.text_file.read_bytes().decode("utf-8") if args.text_file else None
        return ReplayEngine(
            load_tokenizer(args.tokenizer or "smollm2"),
            text,
            rate=args.rate or None,
            jitter=args.jitter,
            burst=args.burst,
            first_token_delay=args.first_token_delay,
            seed=args.seed or 0,
        )
    return LlamaCppEngine.load(
        args.model or "smollm2", n_ctx=args.n_ctx, n_threads=args.threads, on_progress=_stderr
    )


VLLM_OPTIONS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "distributed_executor_backend",
    "max_model_len",
    "dtype",
    "enforce_eager",
)


def _build_upstream(args: argparse.Namespace) -> Engine:
    from tokenrelay._errors import ConfigError, TokenizerError
    from tokenrelay.engines.upstream import UpstreamEngine, discover_model
    from tokenrelay.tokenizers import load_tokenizer

    if not args.upstream:
        raise ConfigError("--engine upstream needs at least one --upstream URL")
    model = args.model
    if model is None and args.upstream_protocol in ("openai", "llamacpp"):
        model = discover_model(args.upstream[0], api_key=args.upstream_api_key)
    source = args.tokenizer or model
    if source is None:
        raise ConfigError("--engine upstream needs --tokenizer (or --model naming a loadable tokenizer)")
    try:
        tokenizer = load_tokenizer(source)
    except TokenizerError as exc:
        raise ConfigError(
            f"cannot load the tokenizer of {source!r} offline ({exc.message}); pass --tokenizer NAME_OR_FILE"
        ) from exc
    return UpstreamEngine(
        args.upstream,
        tokenizer,
        model=model,
        protocol=args.upstream_protocol,
        api_key=args.upstream_api_key,
        health_interval=args.health_interval,
    )


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


def _summary(final: Finished) -> dict[str, object]:
    timings = final.timings
    return {
        "finish_reason": final.reason,
        "matched": final.matched,
        "usage": {
            "prompt_tokens": final.usage.prompt_tokens,
            "completion_tokens": final.usage.completion_tokens,
            "total_tokens": final.usage.total_tokens,
        },
        "timings": None
        if timings is None
        else {
            "ttft_s": timings.ttft,
            "inter_token_p50_s": timings.p50,
            "inter_token_p95_s": timings.p95,
            "total_s": timings.total,
            "gaps_s": list(timings.gaps),
        },
    }


async def _relay(args: argparse.Namespace, engine: Engine, out: _ByteSink) -> Finished:
    from tokenrelay.engines import SamplingParams, stream_events

    prompt_text = sys.stdin.read() if args.prompt == "-" else args.prompt
    prompt: str | list[dict[str, str]]
    if args.raw or args.engine == "replay":
        prompt = prompt_text
    else:
        prompt = [{"role": "user", "content": prompt_text}]
        if args.system:
            prompt.insert(0, {"role": "system", "content": args.system})
    params = SamplingParams(
        max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed
    )
    final: Finished | None = None
    events = stream_events(engine, prompt, params, stops=args.stop, include_stop=args.include_stop)
    try:
        async with contextlib.aclosing(events):
            async for event in events:
                if isinstance(event, Finished):
                    final = event
                    continue
                if args.json:
                    line = {"delta": event.text, "token_ids": list(event.token_ids)}
                    out.write(json.dumps(line, ensure_ascii=False).encode("utf-8") + b"\n")
                else:
                    out.write(event.text.encode("utf-8"))
                out.flush()
    finally:
        await engine.aclose()
    assert final is not None
    return final


def _run_generate(args: argparse.Namespace) -> int:
    engine = _build_engine(args)
    out = _stdout_bytes()
    final = asyncio.run(_relay(args, engine, out))
    if args.json:
        out.write(json.dumps(_summary(final), ensure_ascii=False).encode("utf-8") + b"\n")
        out.flush()
        return 0
    out.write(b"\n")
    out.flush()
    t = final.timings or Timings(ttft=None, gaps=(), total=None)
    tokens = final.usage.completion_tokens
    rate = ""
    if t.total is not None and t.ttft is not None and tokens > 1 and t.total > t.ttft:
        rate = f" ({(tokens - 1) / (t.total - t.ttft):.0f} tok/s after the first)"
    _stderr(
        f"TTFT {_ms(t.ttft)} · inter-token p50 {_ms(t.p50)} p95 {_ms(t.p95)} · total {_ms(t.total)}"
        f" · {tokens} tokens{rate} · finish: {final.reason}"
    )
    return 0


# -- serve ---------------------------------------------------------------------------------------------------


def _configure_serve(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--api-key", default=os.environ.get("TOKENRELAY_API_KEY"), help="require 'Authorization: Bearer KEY'"
    )
    parser.add_argument(
        "--max-active",
        type=int,
        help="generations at once (default: 1 llamacpp, 64 replay, 256 vllm/upstream)",
    )
    parser.add_argument("--max-queued", type=int, default=256, help="waiting generations before 429")
    parser.add_argument(
        "--max-tokens-limit", type=int, help="largest max_tokens a request may ask (default: n_ctx)"
    )
    parser.add_argument("--default-max-tokens", type=int, default=512)
    parser.add_argument(
        "--keepalive", type=float, default=15.0, help="seconds of silence before a keep-alive"
    )
    parser.add_argument("--send-timeout", type=float, default=30.0, help="drop clients that stop reading")
    parser.add_argument("--no-gzip", action="store_true", help="do not compress ordinary responses")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    _add_engine_options(parser)


def _run_serve(args: argparse.Namespace) -> int:
    from tokenrelay.server import ServerConfig, serve

    engine = _build_engine(args)
    llama = args.engine == "llamacpp"
    batching = args.engine in ("upstream", "vllm")  # the engine queues and batches itself
    config = ServerConfig(
        api_key=args.api_key or None,
        max_active=args.max_active or (1 if llama else 256 if batching else 64),
        max_queued=args.max_queued,
        max_tokens_limit=args.max_tokens_limit or (args.n_ctx if llama else 4096),
        default_max_tokens=args.default_max_tokens,
        keepalive_interval=args.keepalive,
        send_timeout=args.send_timeout,
        gzip=not args.no_gzip,
    )
    _stderr(f"tokenrelay: serving {engine.model} on http://{args.host}:{args.port} (chat page at /)")
    serve(engine, config, host=args.host, port=args.port, log_level=args.log_level)
    return 0


COMMANDS: list[Command] = [
    Command("generate", "stream one reply to the terminal", _configure_generate, _run_generate),
    Command(
        "serve", "serve an OpenAI-compatible streaming API and the chat page", _configure_serve, _run_serve
    ),
    Command("doctor", doctor_command.HELP, doctor_command.configure, doctor_command.run),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tokenrelay", description="Carry an LLM's streamed reply to the terminal without breaking it."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.configure(sub.add_parser(command.name, help=command.help, description=command.help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (``tokenrelay`` / ``python -m tokenrelay``); returns the exit status."""
    args = build_parser().parse_args(argv)
    run = next(c.run for c in COMMANDS if c.name == args.command)
    try:
        return run(args)
    except TokenRelayError as exc:
        _stderr(f"tokenrelay {args.command}: error: {exc.message}")
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `tokenrelay generate ... | head`: the reader left; that is not an error of ours.
        return 0
