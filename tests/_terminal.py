"""Run ``tokenrelay`` as a user does: a real subprocess, on a pipe or on a pseudo-terminal.

``Terminal`` drives a command on a pty that is its controlling terminal, so typing Ctrl-C (``\\x03``) makes
the kernel send SIGINT to it, Ctrl-D ends input, and ``input()`` gets readline line editing: the same
terminal a person types into. What the command writes (stdout and stderr, as on a screen) is read with
``expect``, ANSI escape sequences removed.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]")

__all__ = ["EXTRA_BLOCKER", "ROOT", "Terminal", "cli_env", "tokenrelay"]

#: ``python -c EXTRA_BLOCKER MODULES ARGS``: ``tokenrelay ARGS`` as if the comma-separated top-level
#: MODULES had never been installed (a meta-path finder refuses them).
EXTRA_BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys
    BLOCKED = set(sys.argv.pop(1).split(","))

    class Blocker(importlib.abc.MetaPathFinder):  # as if pip had never installed these
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    from tokenrelay.cli import main
    raise SystemExit(main(sys.argv[1:]))
    """
)


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a ``tokenrelay`` subprocess: this checkout's sources first, no inherited
    TOKENRELAY_* settings, unbuffered output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOKENRELAY_")}
    paths = [str(ROOT / "src"), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1", TERM="dumb", **extra)
    return env


def tokenrelay(
    *args: str, env: dict[str, str] | None = None, input: bytes | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[bytes]:
    """``python -m tokenrelay ARGS`` to completion, stdout and stderr captured as bytes."""
    return subprocess.run(
        [sys.executable, "-m", "tokenrelay", *args],
        env=env or cli_env(),
        input=input,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def _controlling_terminal() -> None:  # runs in the child between fork and exec
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``python -m tokenrelay ARGS`` on a pseudo-terminal."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tokenrelay", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env or cli_env(),
            preexec_fn=_controlling_terminal,
            close_fds=True,
        )
        os.close(slave)
        self.fd = master
        self.seen = b""  # everything shown so far, escape sequences removed
        self._pos = 0  # where the next expect() starts looking

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the command exited and closed the terminal
            data = b""
        if not data:
            return False
        self.seen = _ANSI.sub(b"", self.seen + data)
        return True

    def expect(self, pattern: str, timeout: float = 30) -> str:
        """Wait until ``pattern`` (a regex) appears after the last match; return what came before it."""
        regex = re.compile(pattern.encode("utf-8"))
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self.seen, self._pos)
            if match:
                before = self.seen[self._pos : match.start()]
                self._pos = match.end()
                return before.decode("utf-8", "replace")
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(min(left, 0.2)):
                if match := regex.search(self.seen, self._pos):
                    continue
                shown = self.seen[self._pos :].decode("utf-8", "replace")
                raise AssertionError(f"{pattern!r} not shown; after the last match the screen has:\n{shown}")

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode("utf-8"))

    def line(self, text: str) -> None:
        self.type(text + "\r")  # Enter sends CR; the terminal turns it into the newline input() reads

    def ctrl_c(self) -> None:
        self.type("\x03")

    def ctrl_d(self) -> None:
        self.type("\x04")

    def wait(self, timeout: float = 20) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.1)
        while self._read(0):  # what it wrote last
            if not select.select([self.fd], [], [], 0)[0]:
                break
        return self.proc.wait(timeout=1)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        os.close(self.fd)

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
