"""Several worker processes on one port: ``tokenrelay serve --workers N``.

For the engines that keep no model in the process (``upstream``, ``replay``): one process relays what one
core can, so N processes relay up to N times that. The parent binds the port once (``run.bind_socket``: a
port in use is still one line at start), then supervises N workers that each build the engine and serve it:

- **the sockets**: on Linux each worker listens on a socket of its own, all bound by the parent to the one
  port with SO_REUSEPORT, and the kernel spreads new connections over them by a hash of the client's address.
  One socket shared by every worker (as uvicorn's and gunicorn's workers share theirs) was measured lopsided:
  whichever worker is idle when a burst of connections arrives accepts them all, and kept-alive connections
  stay where they landed (``benchmarks/workers.py``: 16 saturating connections, all on one of two workers,
  1.1× the tokens/s of one worker). Elsewhere (no balancing SO_REUSEPORT) the workers share one socket.
- **start**: the workers are spawned (a fresh interpreter each, not forked: nothing half-initialised from the
  parent). One that fails before it serves stops the start: the others are stopped and the exit status is 3
  (the worker's own error is on stderr above).
- **a crash**: a worker that exits while the server runs is replaced in the same row of the board. One that
  dies within ``_QUICK`` seconds of starting is restarted after a growing pause (up to 30 s), so a worker that
  cannot live does not spin. Its socket is closed at once and a new one bound for the replacement: the
  connections it held, accepted or still queued, are lost with it, and no new one waits for its restart.
- **SIGTERM or SIGINT**: the parent closes its copy of the socket and sends each worker SIGTERM; each drains
  by the single-process rule (``run.RelayServer``: new generations get a 503, running replies get
  ``--graceful-timeout`` seconds, then an error event and ``[DONE]``). The parent exits 0 when every worker
  did; a second signal makes the workers stop at once (SIGINT, as for a single process). A worker whose
  parent is gone (killed with SIGKILL) drains by itself.
- **one server to the outside**: the workers share a board (``server.board``: their generations, and each
  upstream replica's in-flight requests and counters) and prometheus_client's multiprocess files
  (``PROMETHEUS_MULTIPROC_DIR``, a temporary folder of the parent's), so ``/metrics`` and ``/health`` in any
  worker are the whole server's, and the least-loaded pick sees every worker's requests. Limits
  (``--max-active``, ``--max-queued``) are per worker.

uvicorn has a supervisor of its own (``uvicorn.supervisors.Multiprocess``), but it runs its own ``Server``
on an app named by an import string; a worker here builds its engine from the command's options, runs
``RelayServer`` (the drain above) and needs its row on the board, so the loop is ours (about 100 lines).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from tokenrelay._errors import TokenRelayError
from tokenrelay.engines.base import Engine

from .app import ServerConfig, create_app
from .board import WORKER_CELLS, Board, Seat
from .run import _BACKSTOP, bind_socket, uvicorn_server

__all__ = ["serve_workers"]

log = logging.getLogger("tokenrelay.server")

_QUICK = 10.0  # a worker that dies sooner than this after its start is restarted after a pause
_PID, _READY = WORKER_CELLS.index("pid"), WORKER_CELLS.index("ready")


@dataclass(frozen=True)
class _Plan:
    """What a worker needs to serve: picklable, sent to each spawned process."""

    build: Callable[[], Engine]
    config: ServerConfig
    board: str
    workers: int
    replicas: int
    log_level: str
    graceful_timeout: float
    header_timeout: float


def _worker(index: int, plan: _Plan, sock: socket.socket) -> None:
    """A worker process: build the engine, take the board's row ``index``, serve ``sock`` until told."""
    logging.basicConfig(
        level=plan.log_level.upper(),
        format=f"%(asctime)s %(levelname)s %(name)s [worker {index}]: %(message)s",
    )
    board = Board(plan.board, plan.workers, plan.replicas)
    row = board.row(index)
    try:
        engine = plan.build()
    except TokenRelayError as exc:
        log.error("worker %d cannot start: %s", index, exc.message)
        raise SystemExit(2) from None
    row[_PID] = os.getpid()
    app = create_app(engine, plan.config, seat=Seat(board, index))
    server = uvicorn_server(
        app,
        port=sock.getsockname()[1],
        log_level=plan.log_level,
        graceful_timeout=plan.graceful_timeout,
        header_timeout=plan.header_timeout,
        on_started=lambda: row.__setitem__(_READY, 1),
    )
    parent = os.getppid()

    def watch_parent() -> None:  # a parent killed outright leaves its workers: they drain and go
        while not server.should_exit:
            if os.getppid() != parent:
                log.warning("worker %d: the supervising process is gone; shutting down", index)
                server.should_exit = True
            time.sleep(0.5)

    threading.Thread(target=watch_parent, name="tokenrelay-parent-watch", daemon=True).start()
    with sock, contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[sock])
    if not server.started:
        raise SystemExit(3)


class _Sockets:
    """The listening sockets of the port: one per worker (SO_REUSEPORT, Linux), or one for all."""

    def __init__(self, sock: socket.socket, workers: int) -> None:
        self.host, self.port = sock.getsockname()[:2]
        self.own = workers > 1 and sys.platform.startswith("linux")
        if self.own:
            sock.close()  # it holds the port without SO_REUSEPORT: the workers' sockets take its place
            self.each = [self._bind() for _ in range(workers)]
        else:
            self.each = [sock] * workers

    def _bind(self) -> socket.socket:
        return bind_socket(self.host, self.port, reuse_port=True)

    def renew(self, index: int) -> None:
        """Worker ``index`` is gone: drop its socket (and what waits in it), bind a new one for its successor."""
        if self.own:
            self.each[index].close()
            self.each[index] = self._bind()

    def close(self) -> None:
        for sock in set(self.each):
            sock.close()


class _Supervisor:
    def __init__(self, plan: _Plan, board: Board, sockets: _Sockets) -> None:
        self.plan, self.board, self.sockets = plan, board, sockets
        self.context = multiprocessing.get_context("spawn")
        self.processes: dict[int, BaseProcess] = {}
        self.started_at: dict[int, float] = {}
        self.quick_deaths: dict[int, int] = {}
        self.restart_at: dict[int, float] = {}
        self.ready = False
        self.signals = 0

    def start(self, index: int) -> None:
        self.board.clear_live(index)
        process = self.context.Process(
            target=_worker,
            args=(index, self.plan, self.sockets.each[index]),
            name=f"tokenrelay-worker-{index}",
            daemon=False,
        )
        process.start()
        self.processes[index], self.started_at[index] = process, time.monotonic()
        log.info("worker %d started (pid %s)", index, process.pid)

    def exited(self, index: int) -> None:
        process = self.processes.pop(index)
        process.join()
        self.board.clear_live(index)
        if self.signals:
            return
        self.sockets.renew(index)
        lived = time.monotonic() - self.started_at[index]
        quick = self.quick_deaths[index] = self.quick_deaths.get(index, 0) + 1 if lived < _QUICK else 0
        pause = 0.0 if quick == 0 else min(30.0, 0.5 * 2 ** (quick - 1))
        log.warning(
            "worker %d (pid %s) exited with status %s after %.1fs; restarting it%s",
            index,
            process.pid,
            process.exitcode,
            lived,
            f" in {pause:g}s" if pause else "",
        )
        self.restart_at[index] = time.monotonic() + pause

    def stop(self) -> None:
        """The first signal: stop accepting here, and let every worker drain."""
        self.sockets.close()  # with every worker's copy closed too, new connections are refused
        self.restart_at.clear()
        log.info("shutting down: %d workers draining", len(self.processes))
        self.forward(signal.SIGTERM)

    def forward(self, sig: signal.Signals) -> None:
        for process in self.processes.values():
            if process.pid is not None and process.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, sig)

    def check_ready(self) -> None:
        if not self.ready and all(self.board.row(i)[_READY] for i in range(self.plan.workers)):
            self.ready = True
            log.info("%d workers serving", self.plan.workers)


def serve_workers(
    build: Callable[[], Engine],
    config: ServerConfig,
    *,
    workers: int,
    sock: socket.socket,
    replicas: int = 0,
    log_level: str = "info",
    graceful_timeout: float = 5.0,
    header_timeout: float = 10.0,
) -> int:
    """Serve on ``sock`` with ``workers`` processes, each running ``build()``'s engine (``replicas``: how many
    upstream replicas it relays from, for the board), until SIGTERM or SIGINT; returns the exit status.
    ``build`` and ``config`` are sent to the workers, so they must pickle (a module-level function, or a
    ``functools.partial`` of one)."""
    if workers < 1:
        raise ValueError("workers must be ≥ 1")
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_dir = Path(tempfile.mkdtemp(prefix="tokenrelay-workers-"))
    (run_dir / "metrics").mkdir()
    saved_env = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(run_dir / "metrics")  # read by the spawned workers
    board = Board.create(run_dir / "board", workers, replicas)
    plan = _Plan(
        build,
        config,
        str(run_dir / "board"),
        workers,
        replicas,
        log_level,
        graceful_timeout,
        header_timeout,
    )
    supervisor = _Supervisor(plan, board, _Sockets(sock, workers))
    wake_read, wake_write = socket.socketpair()
    wake_write.setblocking(False)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def on_signal(sig: int, frame: Any) -> None:
        supervisor.signals += 1

    old_wakeup = signal.set_wakeup_fd(wake_write.fileno())
    for sig in previous:
        signal.signal(sig, on_signal)
    status = 0
    try:
        for index in range(workers):
            supervisor.start(index)
        handled, deadline, allowed = 0, float("inf"), graceful_timeout + _BACKSTOP + 5.0
        while supervisor.processes or supervisor.restart_at:
            if supervisor.signals > handled:
                if handled == 0:
                    supervisor.stop()
                    deadline = time.monotonic() + allowed
                else:  # a second signal: stop now, as a single server does on a second Ctrl-C
                    supervisor.forward(signal.SIGINT)
                handled = supervisor.signals
            if time.monotonic() > deadline:
                log.error("workers still running %.0fs after shutdown began: killing them", allowed)
                supervisor.forward(signal.SIGKILL)
                deadline = float("inf")
            now = time.monotonic()
            for index, due in list(supervisor.restart_at.items()):
                if due <= now:
                    del supervisor.restart_at[index]
                    supervisor.start(index)
            waits = [due - now for due in supervisor.restart_at.values()]
            timeout = max(0.0, min([1.0 if supervisor.ready else 0.05, *waits]))
            by_sentinel = {p.sentinel: i for i, p in supervisor.processes.items()}
            for ready in multiprocessing.connection.wait([wake_read, *by_sentinel], timeout):
                if ready is wake_read:
                    with contextlib.suppress(BlockingIOError):
                        wake_read.recv(64)
                    continue
                assert isinstance(ready, int)
                index = by_sentinel[ready]
                process = supervisor.processes[index]
                if not supervisor.ready and not supervisor.signals:
                    log.error("worker %d exited with status %s before it served", index, process.exitcode)
                    supervisor.processes.pop(index).join()
                    supervisor.signals += 1  # stop the others
                    status = 3
                    continue
                if supervisor.signals and process.exitcode not in (0, None):
                    status = status or 1
                supervisor.exited(index)
            supervisor.check_ready()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(old_wakeup)
        wake_read.close()
        wake_write.close()
        supervisor.forward(signal.SIGKILL)  # only if something above failed: none runs after a clean stop
        for process in supervisor.processes.values():
            process.join()
        board.close()
        if saved_env is None:
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        else:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = saved_env
        shutil.rmtree(run_dir, ignore_errors=True)
    return status
