"""``tokenrelay generate`` (one reply) and ``tokenrelay chat`` (a conversation) on a terminal.

Both take a ready :class:`~tokenrelay.chat_backends.Backend` from ``tokenrelay.cli`` (the embedded engine, or
a server with ``--url``) and run every turn on one event loop.

``generate`` writes the reply alone to stdout as UTF-8 whatever the locale, flushing every piece; timings
go to stderr. ``--json`` writes JSON Lines instead: one object per piece, then a summary. Ctrl-C stops the
reply, ends the line (the terminal is left clean), writes the summary all the same (``"interrupted":
true``) and exits with 130, as a shell expects of an interrupted command.

``chat`` reads messages at a ``>>>`` prompt (with line editing when the terminal has readline), streams each
reply, and keeps the conversation: each request carries the whole history. Ctrl-C stops a reply and keeps
what was shown of it (as the page's Stop does); at the prompt it only clears the line. Ctrl-D or ``/exit``
quits. With stdin not a terminal, it answers one message per line and prints no prompt, for scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from typing import Protocol

from tokenrelay._errors import TokenRelayError
from tokenrelay.chat_backends import Backend, Options, Piece, Prompt, Turn, run_interruptible, stream_turn

__all__ = ["CHAT_COMMANDS", "run_chat", "run_generate"]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _ByteSink(Protocol):
    def write(self, data: bytes, /) -> int: ...

    def flush(self) -> None: ...


class _TextAsBytes:
    """Fallback for a stdout replaced by a text-only stream (an IDE console, a test capture)."""

    def write(self, data: bytes) -> int:
        return sys.stdout.write(data.decode("utf-8"))

    def flush(self) -> None:
        sys.stdout.flush()


def _stdout_bytes() -> _ByteSink:
    # Write bytes, not text: a C/POSIX locale would otherwise turn every non-ASCII reply into an error.
    buffer: _ByteSink | None = getattr(sys.stdout, "buffer", None)
    return buffer if buffer is not None else _TextAsBytes()


def options_from(args: argparse.Namespace) -> Options:
    return Options(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        stops=tuple(args.stop),
        include_stop=getattr(args, "include_stop", False),
    )


def _close(loop: asyncio.AbstractEventLoop, backend: Backend) -> None:
    """Release the backend, then finish the async generators left open (as ``asyncio.run`` does)."""
    with contextlib.suppress(Exception):
        run_interruptible(loop, backend.aclose())
    with contextlib.suppress(Exception):
        loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


# -- generate ------------------------------------------------------------------------------------------------


def run_generate(args: argparse.Namespace, backend: Backend) -> int:
    text = sys.stdin.read() if args.prompt == "-" else args.prompt
    prompt: Prompt
    if args.raw:
        prompt = text
    else:
        prompt = [{"role": "user", "content": text}]
        if args.system:
            prompt.insert(0, {"role": "system", "content": args.system})
    out = _stdout_bytes()

    def write(piece: Piece) -> None:
        if args.json:
            line: dict[str, object] = {"delta": piece.text}
            if piece.token_ids:
                line["token_ids"] = list(piece.token_ids)
            out.write(json.dumps(line, ensure_ascii=False).encode("utf-8") + b"\n")
        else:
            out.write(piece.text.encode("utf-8"))
        out.flush()

    loop = asyncio.new_event_loop()
    turn = Turn()
    try:
        if not run_interruptible(loop, backend.start()):
            raise KeyboardInterrupt
        turn = Turn()  # timed from here: TTFT is the wait for the first piece
        if not run_interruptible(loop, stream_turn(backend, prompt, options_from(args), turn, write)):
            turn.interrupt()
        # Written before the engine is released: that may wait for a step that was running at Ctrl-C.
        if args.json:
            out.write(json.dumps(turn.summary(), ensure_ascii=False).encode("utf-8") + b"\n")
        else:
            out.write(b"\n")  # the reply's last line ends, interrupted or not: the shell prompt starts clean
        out.flush()
        if not args.json:
            _stderr(turn.stats())
    except BaseException:
        if turn.parts and not args.json:
            out.write(b"\n")  # the error goes on its own line, after the part of the reply shown
            out.flush()
        raise
    finally:
        _close(loop, backend)
    return 130 if turn.interrupted else 0


# -- chat ----------------------------------------------------------------------------------------------------

CHAT_COMMANDS = {
    "/help": "this list (also /?)",
    "/clear": "forget the conversation (keeps the system prompt)",
    "/system TEXT": "set the system prompt (/system alone removes it); the conversation is kept",
    "/history": "show the conversation so far",
    "/exit": "quit (also /quit, /bye, Ctrl-D)",
    '"""': 'start a message of several lines; end it with """',
}
_EXIT = frozenset({"/exit", "/quit", "/bye"})


class _Chat:
    def __init__(self, args: argparse.Namespace, backend: Backend) -> None:
        self.args = args
        self.backend = backend
        self.system: str | None = args.system
        self.history: list[dict[str, str]] = []
        self.interactive = sys.stdin.isatty()
        self.out = _stdout_bytes()
        self.loop = asyncio.new_event_loop()

    def read_message(self) -> str:
        """One message; ``\"\"\"`` starts several lines. Raises ``EOFError`` at the end of input."""
        prompt, more = (">>> ", "... ") if self.interactive else ("", "")
        line = input(prompt)
        if not line.lstrip().startswith('"""'):
            return line
        lines = [line.lstrip()[3:]]
        while not lines[-1].rstrip().endswith('"""'):
            lines.append(input(more))
        lines[-1] = lines[-1].rstrip()[:-3]
        return "\n".join(lines).strip("\n")

    def command(self, line: str) -> bool:
        """Run a ``/command``; ``False`` means quit."""
        name, _, rest = line.strip().partition(" ")
        if name in _EXIT:
            return False
        if name in ("/help", "/?"):
            for usage, what in CHAT_COMMANDS.items():
                _stderr(f"  {usage:<14} {what}")
        elif name == "/clear":
            self.history.clear()
            _stderr("(conversation cleared)")
        elif name == "/system":
            self.system = rest.strip() or None
            _stderr("(system prompt set)" if self.system else "(system prompt removed)")
        elif name == "/history":
            for message in self.messages():
                _stderr(f"{message['role']}: {message['content']}")
        else:
            _stderr(f"unknown command {name}; /help lists them")
        return True

    def messages(self) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + self.history

    def reply(self, text: str) -> None:
        user = {"role": "user", "content": text}
        turn = Turn()

        def write(piece: Piece) -> None:
            self.out.write(piece.text.encode("utf-8"))
            self.out.flush()

        task = stream_turn(self.backend, [*self.messages(), user], options_from(self.args), turn, write)
        try:
            finished = run_interruptible(self.loop, task)
        except TokenRelayError as exc:
            if turn.parts:
                self.out.write(b"\n")
            if not self.interactive:
                raise
            _stderr(f"error: {exc.message}")
            return
        if not finished:
            turn.interrupt()
        self.out.write(b"\n\n" if self.interactive else b"\n")
        self.out.flush()
        if turn.interrupted:
            _stderr("(interrupted)")
        if turn.text or not turn.interrupted:  # what was shown stays in the conversation, as on the page
            self.history += [user, {"role": "assistant", "content": turn.text}]
        if self.args.verbose:
            _stderr(turn.stats())

    def run(self) -> int:
        if not run_interruptible(self.loop, self.backend.start()):
            raise KeyboardInterrupt
        if self.interactive:
            with contextlib.suppress(ImportError):
                import readline  # noqa: F401 — input() gets line editing and history
            _stderr(f"tokenrelay chat · {self.backend.label} · /help for commands, Ctrl-D or /exit to quit")
        while True:
            try:
                line = self.read_message()
            except EOFError:
                if self.interactive:
                    self.out.write(b"\n")  # Ctrl-D leaves the cursor after the prompt
                    self.out.flush()
                return 0
            except KeyboardInterrupt:
                if not self.interactive:
                    raise
                self.out.write(b"\n")
                self.out.flush()
                _stderr("(Ctrl-D or /exit to quit)")
                continue
            if line.strip().startswith("/") and not line.strip().startswith("//"):
                if not self.command(line):
                    return 0
            elif line.strip():
                self.reply(line)

    def close(self) -> None:
        _close(self.loop, self.backend)


def run_chat(args: argparse.Namespace, backend: Backend) -> int:
    chat = _Chat(args, backend)
    try:
        return chat.run()
    finally:
        chat.close()
