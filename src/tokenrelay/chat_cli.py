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
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
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


DIM, UNDIM = b"\x1b[2m", b"\x1b[22m"


def _shown(piece: Piece, dim: bool) -> bytes:
    """A piece as the terminal shows it: reasoning dimmed (SGR 2, then 22: a piece never leaves it dim)."""
    text = piece.text.encode("utf-8")
    return DIM + text + UNDIM if piece.reasoning and dim else text


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
    dim = sys.stdout.isatty()

    def write(piece: Piece) -> None:
        if piece.reasoning and args.hide_reasoning:
            return
        if args.json:
            line: dict[str, object] = {"reasoning" if piece.reasoning else "delta": piece.text}
            if piece.token_ids:
                line["token_ids"] = list(piece.token_ids)
            out.write(json.dumps(line, ensure_ascii=False).encode("utf-8") + b"\n")
        else:
            out.write(_shown(piece, dim))
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
#: Seconds between the nudges that bring a Ctrl-C the prompt's wait missed to it (``_ctrl_c_reaches_input``).
_NUDGE_EVERY = 0.02


@contextlib.contextmanager
def _ctrl_c_reaches_input() -> Iterator[None]:
    """While ``input()`` waits at the prompt, Ctrl-C interrupts it however late the wait starts.

    CPython's readline waits for a key in ``select()`` and runs Python's signal handlers only when that call
    fails with EINTR. A SIGINT that arrives after the prompt is written but before ``select()`` waits (the
    process preempted in between: a busy machine) only marks the signal pending, and ``select()`` then waits
    for a key: the Ctrl-C is seen at the next Enter, so it looks ignored. Here, the signal also writes its
    number to a pipe (``signal.set_wakeup_fd``); a thread that reads SIGINT there sends the main thread SIGUSR1
    (whose handler does nothing) every ``_NUDGE_EVERY`` s until the SIGINT handler has run: the first nudge
    that lands inside ``select()`` makes it fail with EINTR, and readline runs the pending handler.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_kill"):
        yield  # (no signal handlers outside the main thread; Windows has neither readline nor pthread_kill)
        return
    handled = threading.Event()
    done = threading.Event()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    main = threading.get_ident()

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if not handled.is_set():  # (a second Ctrl-C before the first was answered adds nothing)
            handled.set()
            raise KeyboardInterrupt

    def nudge() -> None:
        while not done.is_set():
            if signal.SIGINT in os.read(wake_read, 256):
                while not handled.wait(_NUDGE_EVERY) and not done.is_set():
                    signal.pthread_kill(main, signal.SIGUSR1)

    old_usr1 = signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    old_int = signal.signal(signal.SIGINT, on_sigint)
    old_wakeup = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    thread = threading.Thread(target=nudge, name="tokenrelay-ctrl-c", daemon=True)
    thread.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(old_wakeup)
        done.set()
        with contextlib.suppress(BlockingIOError):  # (a full pipe wakes it as well)
            os.write(wake_write, b"\0")  # wakes the thread to see ``done``
        thread.join()  # no nudge is sent after this: SIGUSR1 may get its old handler back
        signal.signal(signal.SIGINT, signal.default_int_handler if old_int is None else old_int)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL if old_usr1 is None else old_usr1)
        os.close(wake_read)
        os.close(wake_write)


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
            if piece.reasoning and self.args.hide_reasoning:
                return
            self.out.write(_shown(piece, self.interactive))
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
                if self.interactive:
                    with _ctrl_c_reaches_input():
                        line = self.read_message()
                else:
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
