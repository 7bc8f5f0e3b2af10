"""The ``tokenrelay`` command: one subcommand per function, registered in ``COMMANDS``.

To add a subcommand (``serve``, ``doctor``, ``bench``), write a ``configure(parser)`` that adds its options
and a ``run(args) -> int`` that does the work (import heavy modules inside ``run``, so ``tokenrelay --help``
stays fast), and append a ``Command`` to ``COMMANDS``. Errors at start are one line on stderr, never a
traceback: a ``TokenRelayError`` escaping ``run`` (exit status 2), or a module of an optional part that is not
installed (the line names the pip extra to install). Every ``--help`` shows the defaults.

``generate`` and ``chat`` (in ``tokenrelay.chat_cli``) talk to the embedded engine, or, with ``--url`` (or
``TOKENRELAY_URL``), stream through a running OpenAI-compatible server instead of loading a model.

At ~520 lines this module is over the usual size because it is the whole option surface in one place: every
subcommand's options, defaults and engine construction, which ``--help`` and the tests read together. The
engine options and ``_build_engine`` are the seam to split along if it grows.
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tokenrelay import __version__
from tokenrelay._errors import ConfigError, TokenRelayError
from tokenrelay._extras import missing_extra
from tokenrelay._parsers import REASONING_PARSERS, TOOL_CALL_PARSERS
from tokenrelay.doctor import command as doctor_command
from tokenrelay.engines import ENGINES
from tokenrelay.engines._batching import DEFAULT_PARALLEL, DEFAULT_PREFILL_CHUNK

if TYPE_CHECKING:
    from socket import socket

    from tokenrelay.chat_backends import Backend
    from tokenrelay.engines import Engine
    from tokenrelay.server import ServerConfig

__all__ = ["COMMANDS", "Command", "main"]

#: The environment variables the commands read, listed in every ``--help``.
ENVIRONMENT = {
    "TOKENRELAY_URL": "generate, chat: the server to stream through (as --url)",
    "TOKENRELAY_API_KEY": "serve: the key to require; generate, chat: the key to send (as --api-key)",
}


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _Help(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default, unless it is empty or the help already says what the default is."""

    @staticmethod
    def _shows_default(action: argparse.Action) -> bool:
        default = action.default
        # Flags (True/False) and "nothing" need no mention; 0 and 0.0 do (so no `in (None, False)`: 0 == False).
        nothing = (
            default is None or default is argparse.SUPPRESS or isinstance(default, bool) or default == []
        )
        return bool(action.option_strings) and not nothing and "default" not in (action.help or "")

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        return f"{help_text} (default: %(default)s)" if self._shows_default(action) else help_text

    def _format_action(self, action: argparse.Action) -> str:
        if action.help is None and self._shows_default(action):  # argparse prints no help line for these
            action = copy.copy(action)
            action.help = "(default: %(default)s)"
        return super()._format_action(action)


def _environment_epilog() -> str:
    lines = [f"  {name:<20} {what}" for name, what in ENVIRONMENT.items()]
    return "environment variables:\n" + "\n".join(lines)


# -- engines: shared by generate, chat and serve ---------------------------------------------------------------


def _add_engine_options(parser: argparse.ArgumentParser) -> None:
    """Options that pick and tune an engine: shared by ``generate``, ``chat`` and ``serve``."""
    parser.add_argument("--engine", choices=tuple(ENGINES), default=next(iter(ENGINES)))
    parser.add_argument(
        "--model",
        help="llamacpp: 'smollm2' (built in, the default) or a PATH.gguf; vllm: 'smollm2' or an HF model "
        "folder or id; upstream: the model to ask the replicas for (default: their /v1/models); "
        "with --url (generate, chat): the model to ask the server for (default: its first)",
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--n-ctx",
        type=int,
        default=2048,
        help="llamacpp: tokens per request, prompt plus reply (default: 2048)",
    )
    parser.add_argument("--threads", type=int, default=None, help="llamacpp: CPU threads (default: all, ≤ 8)")
    parser.add_argument(
        "--parallel",
        type=int,
        default=None,
        help=f"llamacpp: requests batched into each decode step (default: {DEFAULT_PARALLEL} for serve, "
        "1 for generate and chat); more wait in the queue",
    )
    parser.add_argument(
        "--prefill-chunk",
        type=int,
        default=DEFAULT_PREFILL_CHUNK,
        help="llamacpp: most prompt tokens read in a step while other replies are being generated, which "
        f"bounds their stall (default: {DEFAULT_PREFILL_CHUNK}); with none generating a step reads up to 512",
    )
    parser.add_argument(
        "--prefix-cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="llamacpp: keep a finished request's KV cells so that a prompt starting the same way (the next "
        "turn of a chat) reads only what is new (default: on)",
    )
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
    upstream.add_argument(
        "--upstream-read-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="a replica that sends nothing this long (before its first byte, or mid-stream) has failed: its "
        "clients get an error event and [DONE], and it is marked down",
    )
    vllm = parser.add_argument_group("vllm engine (vLLM in-process; its options pass through)")
    vllm.add_argument("--tensor-parallel-size", type=int)
    vllm.add_argument("--pipeline-parallel-size", type=int)
    vllm.add_argument("--data-parallel-size", type=int)
    vllm.add_argument("--distributed-executor-backend", choices=("mp", "ray", "uni"))
    vllm.add_argument("--max-model-len", type=int)
    vllm.add_argument("--dtype")
    vllm.add_argument("--enforce-eager", action="store_true")
    vllm.add_argument(
        "--gpu-memory-utilization",
        type=float,
        help="the fraction of the device's memory vLLM reserves (on its CPU build: of all RAM; vLLM's default "
        "0.92 fails where other programs use some)",
    )
    vllm.add_argument(
        "--kv-cache-memory-bytes",
        type=_byte_count,
        help="the KV cache's size (2G, 1.5g, 1073741824), instead of --gpu-memory-utilization (default on "
        "vLLM's CPU build: a quarter of the available RAM, at most 4 GiB; or VLLM_CPU_KVCACHE_SPACE GiB)",
    )


def _byte_count(text: str) -> int:
    from tokenrelay.engines.vllm_memory import parse_bytes

    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _read_text_file(path: Path) -> str:
    """The replay text: UTF-8, read as bytes (text mode would turn CRLF line ends into LF before the replay).
    A missing, unreadable or binary file is a one-line ``ConfigError``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"--text-file {path}: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"--text-file {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from exc
    if "\x00" in text:
        raise ConfigError(f"--text-file {path} looks binary (it contains NUL bytes), not text")
    return text


def _build_engine(args: argparse.Namespace) -> Engine:
    from tokenrelay.engines import DEFAULT_MODEL, LlamaCppEngine, ReplayEngine
    from tokenrelay.tokenizers import load_tokenizer

    if args.engine == "upstream":
        return _build_upstream(args)
    if args.engine == "vllm":
        from tokenrelay.engines.vllm import VLLMEngine

        options = {k: getattr(args, k) for k in VLLM_OPTIONS if getattr(args, k) not in (None, False)}
        return VLLMEngine.load(
            args.model or "smollm2",
            seed=args.seed,
            on_progress=_stderr,
            reasoning_parser=getattr(
                args, "reasoning_parser", None
            ),  # serve's: vLLM enforces budgets in its tags
            **options,
        )
    if args.engine == "replay":
        text = _read_text_file(args.text_file) if args.text_file else None
        return ReplayEngine(
            load_tokenizer(args.tokenizer or "smollm2"),
            text,
            rate=args.rate or None,
            jitter=args.jitter,
            burst=args.burst,
            first_token_delay=args.first_token_delay,
            seed=args.seed or 0,
        )
    parallel = args.parallel or (DEFAULT_PARALLEL if args.command == "serve" else 1)
    return LlamaCppEngine.load(
        args.model or DEFAULT_MODEL,
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        n_parallel=parallel,
        prefill_chunk=args.prefill_chunk,
        prefix_cache=args.prefix_cache,
        on_progress=_stderr,
    )


VLLM_OPTIONS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "distributed_executor_backend",
    "max_model_len",
    "dtype",
    "enforce_eager",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
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
        read_timeout=args.upstream_read_timeout,
    )


# -- generate and chat ---------------------------------------------------------------------------------------


def _add_client_options(parser: argparse.ArgumentParser) -> None:
    """Where the reply comes from: a running server (``--url``), else the embedded engine."""
    server = parser.add_argument_group("a running server (instead of loading a model here)")
    server.add_argument(
        "--url",
        default=os.environ.get("TOKENRELAY_URL") or None,
        help="stream through the OpenAI-compatible server at URL (http://HOST:PORT, HOST:PORT or .../v1; "
        "default: $TOKENRELAY_URL, else the embedded engine)",
    )
    server.add_argument("--port", type=int, help="the same as --url http://127.0.0.1:PORT")
    server.add_argument(
        "--api-key", help="sent as 'Authorization: Bearer KEY' (default: $TOKENRELAY_API_KEY)"
    )
    server.add_argument(
        "--api",
        choices=("auto", "chat", "responses", "messages"),
        default="auto",
        help="with --url: the API to ask the server, chat completions, the Responses API or Anthropic's "
        "Messages API, or auto (chat, and the Responses API when the server has no chat endpoint)",
    )


def _add_sampling_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--system", help="a system message before the conversation")
    parser.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    parser.add_argument("--max-tokens", type=int, default=256, help="the longest reply, in tokens")
    parser.add_argument("--temperature", type=float, default=0.7, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling")


def _configure_generate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", help='the prompt; "-" reads it from stdin')
    parser.add_argument("--raw", action="store_true", help="send the prompt as plain text, no chat template")
    _add_sampling_options(parser)
    _add_reasoning_option(parser)
    parser.add_argument("--include-stop", action="store_true", help="keep the stop string in the output")
    parser.add_argument("--json", action="store_true", help="JSON Lines on stdout: deltas, then a summary")
    _add_client_options(parser)
    _add_engine_options(parser)


def _budget(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of tokens: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a budget is at least 0 tokens, not {value}")
    return value


def _add_reasoning_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hide-reasoning",
        action="store_true",
        help="do not show the model's reasoning (shown dimmed, apart from the answer, by default)",
    )


def _configure_chat(parser: argparse.ArgumentParser) -> None:
    _add_sampling_options(parser)
    _add_reasoning_option(parser)
    parser.add_argument("--verbose", action="store_true", help="timings on stderr after each reply")
    _add_client_options(parser)
    _add_engine_options(parser)


def _backend(args: argparse.Namespace) -> Backend:
    """A running server when ``--url``/``--port``/``TOKENRELAY_URL`` names one, else the embedded engine."""
    from tokenrelay._urls import api_base
    from tokenrelay.chat_backends import EngineBackend, RemoteBackend

    url = f"http://127.0.0.1:{args.port}" if args.port is not None else args.url
    if url:
        if getattr(args, "include_stop", False):
            raise ConfigError("--include-stop needs the embedded engine (an OpenAI server drops the stop)")
        api_key = args.api_key or os.environ.get("TOKENRELAY_API_KEY") or None
        return RemoteBackend(api_base(url), api_key=api_key, model=args.model, api=args.api)
    # The replay engine has no chat template: it replays its text, or the message itself.
    return EngineBackend(_build_engine(args), plain=args.engine == "replay")


def _run_generate(args: argparse.Namespace) -> int:
    from tokenrelay.chat_cli import run_generate

    return run_generate(args, _backend(args))


def _run_chat(args: argparse.Namespace) -> int:
    from tokenrelay.chat_cli import run_chat

    return run_chat(args, _backend(args))


# -- serve ---------------------------------------------------------------------------------------------------


def _configure_serve(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--api-key",
        default=os.environ.get("TOKENRELAY_API_KEY"),
        help="require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (default: $TOKENRELAY_API_KEY, else none)",
    )
    parser.add_argument(
        "--served-model-name",
        nargs="+",
        default=[],
        metavar="NAME",
        help="more names the model answers to, as vLLM's option (requests may name any; replies echo the "
        "name asked for): e.g. the names Claude Code asks for",
    )
    parser.add_argument(
        "--max-active",
        type=int,
        help="generations at once (default: --parallel for llamacpp, 64 replay, 256 vllm/upstream)",
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
    parser.add_argument(
        "--header-timeout", type=float, default=10.0, help="seconds a client has to send its request headers"
    )
    parser.add_argument(
        "--body-timeout", type=float, default=30.0, help="seconds a client has to send its request body (408)"
    )
    parser.add_argument(
        "--max-prompt-chars", type=int, default=200_000, help="longer prompts are refused (400) untokenized"
    )
    parser.add_argument(
        "--responses-store",
        type=int,
        default=1000,
        metavar="N",
        help="Responses API: stored responses kept in memory (never on disk) for previous_response_id and GET "
        "/v1/responses/{id}, oldest evicted first; with --workers, per worker, each finding only its own (a 404 "
        "names the id elsewhere); 0 stores none",
    )
    parser.add_argument(
        "--responses-store-mb",
        type=float,
        default=64.0,
        metavar="MB",
        help="Responses API: the stored responses' byte budget (their JSON and conversations), per worker",
    )
    parser.add_argument(
        "--graceful-timeout",
        type=float,
        default=5.0,
        help="on SIGTERM/SIGINT, seconds running replies get to finish before each is ended with an error "
        "event and [DONE]",
    )
    parser.add_argument("--no-gzip", action="store_true", help="do not compress ordinary responses")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes serving the one port, for the upstream and replay engines (an in-process model "
        "would be loaded once per process); --max-active and --max-queued are per worker",
    )
    parsers = parser.add_argument_group("how replies are read (vLLM's parser names)")
    parsers.add_argument(
        "--reasoning-parser",
        choices=REASONING_PARSERS,
        metavar="NAME",
        help="split the reply's reasoning from its answer: "
        + ", ".join(REASONING_PARSERS)
        + " ('none' keeps the tags in the answer; default: detected from the model's chat template, the "
        "GGUF's or --tokenizer's, and none for a template without <think> or [THINK])",
    )
    parsers.add_argument(
        "--reasoning-budget",
        type=_budget,
        metavar="TOKENS",
        help="the most reasoning tokens a reply may spend when its request sets no budget; past it the "
        "embedded engine writes the closing tag itself and the model answers (0: no thinking; default: no cap)",
    )
    parsers.add_argument(
        "--tool-call-parser",
        choices=tuple(TOOL_CALL_PARSERS),
        metavar="NAME",
        help="the markup the model writes tool calls in: "
        + ", ".join(TOOL_CALL_PARSERS)
        + " (default: hermes, tokenrelay's generic format, which it writes into the prompt of a template "
        "that takes no tools; not detected from a template: name it for replies of a model whose template "
        "is not read here, as the replay and upstream engines')",
    )
    _add_engine_options(parser)


def _check_workers(args: argparse.Namespace) -> None:
    if args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: give 1 or more")
    if args.workers > 1 and args.engine in ("llamacpp", "vllm"):
        raise ConfigError(
            f"--workers {args.workers} is for engines that keep no model in the process (upstream, replay): "
            f"with --engine {args.engine} each worker would load its own copy of the model "
            f"({args.workers} copies in memory, competing for the same cores); serve it with one process"
        )


def _run_serve(args: argparse.Namespace) -> int:
    from tokenrelay.engines import LlamaCppEngine
    from tokenrelay.server import ServerConfig, bind_socket, serve

    _check_workers(args)
    sock = bind_socket(args.host, args.port)  # a port in use is an error now, not after the model loaded
    port = sock.getsockname()[1]
    try:
        engine = _build_engine(
            args
        )  # with --workers, once here too: a bad option is one line, before any worker
    except BaseException:
        sock.close()
        raise
    llama = args.engine == "llamacpp"
    batching = args.engine in ("upstream", "vllm")  # the engine queues and batches itself
    config = ServerConfig(
        api_key=args.api_key or None,
        max_active=args.max_active
        or (engine.n_parallel if isinstance(engine, LlamaCppEngine) else 256 if batching else 64),
        max_queued=args.max_queued,
        max_tokens_limit=args.max_tokens_limit or (args.n_ctx if llama else 4096),
        default_max_tokens=args.default_max_tokens,
        keepalive_interval=args.keepalive,
        send_timeout=args.send_timeout,
        body_timeout=args.body_timeout,
        max_prompt_chars=args.max_prompt_chars,
        gzip=not args.no_gzip,
        reasoning_parser=args.reasoning_parser,
        reasoning_budget=args.reasoning_budget,
        tool_call_parser=args.tool_call_parser,
        responses_store_count=args.responses_store,
        responses_store_bytes=int(args.responses_store_mb * (1 << 20)),
        model_aliases=tuple(args.served_model_name),
    )
    if args.workers > 1:
        model = engine.model
        del engine  # each worker builds its own; this one only checked the options
        return _serve_workers(args, model, config, sock)
    _stderr(f"tokenrelay: serving {engine.model} on http://{args.host}:{port} (chat page at /)")
    serve(
        engine,
        config,
        host=args.host,
        port=port,
        log_level=args.log_level,
        sock=sock,
        graceful_timeout=args.graceful_timeout,
        header_timeout=args.header_timeout,
    )
    return 0


def _serve_workers(args: argparse.Namespace, model: str, config: ServerConfig, sock: socket) -> int:
    from tokenrelay.server.workers import serve_workers

    if args.engine == "upstream" and args.model is None and model != "upstream":
        args.model = model  # asked of the replicas once, here, not by every worker
    workers, port = args.workers, sock.getsockname()[1]
    _stderr(f"tokenrelay: serving {model} on http://{args.host}:{port} with {workers} workers")
    return serve_workers(
        functools.partial(_build_engine, args),
        config,
        workers=workers,
        sock=sock,
        replicas=len(args.upstream) if args.engine == "upstream" else 0,
        log_level=args.log_level,
        graceful_timeout=args.graceful_timeout,
        header_timeout=args.header_timeout,
    )


COMMANDS: list[Command] = [
    Command("generate", "stream one reply to the terminal", _configure_generate, _run_generate),
    Command("chat", "chat with the model in the terminal (multi-turn)", _configure_chat, _run_chat),
    Command(
        "serve", "serve an OpenAI-compatible streaming API and the chat page", _configure_serve, _run_serve
    ),
    Command("doctor", doctor_command.HELP, doctor_command.configure, doctor_command.run),
]


def build_parser() -> argparse.ArgumentParser:
    epilog = _environment_epilog()
    parser = argparse.ArgumentParser(
        prog="tokenrelay",
        description="Carry an LLM's streamed reply to the terminal without breaking it.",
        epilog=epilog,
        formatter_class=_Help,
    )
    parser.add_argument("--version", action="version", version=f"tokenrelay {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.configure(
            sub.add_parser(
                command.name,
                help=command.help,
                description=command.help,
                epilog=epilog,
                formatter_class=_Help,
            )
        )
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
    except ModuleNotFoundError as exc:  # an optional part is not installed: say which extra installs it
        error = missing_extra(exc)
        if error is None:
            raise
        _stderr(f"tokenrelay {args.command}: error: {error}")
        return 2
    except KeyboardInterrupt:
        _stderr("")  # end the line the terminal echoed ^C on, so the shell prompt starts clean
        return 130
    except BrokenPipeError:
        # `tokenrelay generate ... | head`: the reader left; that is not an error of ours.
        return 0
