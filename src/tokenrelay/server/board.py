"""The board: a small table of counts shared by the worker processes of one server (``serve --workers N``).

One file of 64-bit integers, mapped by every worker and by the supervising parent: a row per worker, written
only by that worker while it lives (plain stores into its own cells, no lock: one writer per cell, and an
aligned 8-byte store is whole), read by every process. The parent clears a dead worker's live cells (its
pid, its generations in flight, its replicas' in-flight counts) before it starts the replacement in the same
row; the counters stay, so a total over the rows never goes down when a worker is replaced.

A row holds ``WORKER_CELLS`` (pid, ready, active, queued), then ``REPLICA_CELLS`` for each upstream replica
(in flight, healthy in this worker's view, and the per-replica counters of ``engines.upstream.Replica``).
What reads it: ``/health`` (the whole server's generations and workers), ``/metrics`` (the same gauges, and
the replicas' numbers summed over workers), and the upstream engine's least-loaded pick, which sees every
worker's requests in flight on each replica, not only its own.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

from tokenrelay.engines.replicas import REPLICA_CELLS

__all__ = ["WORKER_CELLS", "Board", "ReplicaCells", "Seat"]

#: A worker's own cells, at the start of its row.
WORKER_CELLS = ("pid", "ready", "active", "queued")
# A replica's cells (``engines.upstream.REPLICA_CELLS``) that are live state, cleared when a worker goes.
_LIVE_REPLICA_CELLS = ("active", "healthy")
_CELL = 8  # bytes: one signed 64-bit integer


class Board:
    """The shared table of one server: ``workers`` rows of ``WORKER_CELLS`` and ``replicas`` × ``REPLICA_CELLS``.

    ``Board.create(path, ...)`` makes the file (the parent, before any worker starts); ``Board(path, ...)``
    maps it (each worker). Closing unmaps it.
    """

    def __init__(self, path: str | os.PathLike[str], workers: int, replicas: int) -> None:
        self.workers, self.replicas = workers, replicas
        self.width = len(WORKER_CELLS) + replicas * len(REPLICA_CELLS)
        size = workers * self.width * _CELL
        with open(path, "r+b") as file:
            if os.fstat(file.fileno()).st_size != size:
                raise ValueError(f"{path} is not a board of {workers} workers and {replicas} replicas")
            self._map = mmap.mmap(file.fileno(), size)
        self._cells = memoryview(self._map).cast("q")

    @classmethod
    def create(cls, path: str | os.PathLike[str], workers: int, replicas: int) -> Board:
        width = len(WORKER_CELLS) + replicas * len(REPLICA_CELLS)
        Path(path).write_bytes(bytes(workers * width * _CELL))
        return cls(path, workers, replicas)

    def row(self, worker: int) -> memoryview:
        """Worker ``worker``'s cells (its own to write while it runs)."""
        if not 0 <= worker < self.workers:
            raise IndexError(f"worker {worker} of {self.workers}")
        return self._cells[worker * self.width : (worker + 1) * self.width]

    def _live_rows(self) -> Iterator[memoryview]:
        for worker in range(self.workers):
            row = self.row(worker)
            if row[0]:  # a pid: the worker runs
                yield row

    def running(self) -> int:
        """Workers running now (started, not yet gone)."""
        return sum(1 for _ in self._live_rows())

    def worker_states(self) -> list[dict[str, int]]:
        """The running workers, each with its row's ``WORKER_CELLS`` and its index (``/health`` lists them)."""
        states = []
        for worker in range(self.workers):
            row = self.row(worker)
            if row[0]:
                states.append({"worker": worker, **{c: int(row[i]) for i, c in enumerate(WORKER_CELLS)}})
        return states

    def total(self, cell: str) -> int:
        """``cell`` (one of ``WORKER_CELLS``) summed over the running workers."""
        index = WORKER_CELLS.index(cell)
        return sum(row[index] for row in self._live_rows())

    def replica_total(self, replica: int, cell: str) -> int:
        """Replica ``replica``'s ``cell`` summed over the workers: live cells over the running ones, counters
        over every row (a replaced worker's counts stay)."""
        index = len(WORKER_CELLS) + replica * len(REPLICA_CELLS) + REPLICA_CELLS.index(cell)
        rows = self._live_rows() if cell in _LIVE_REPLICA_CELLS else map(self.row, range(self.workers))
        return sum(row[index] for row in rows)

    def replica_cells(self, worker: int) -> list[ReplicaCells]:
        """Worker ``worker``'s cells for each replica, in order."""
        row, n = self.row(worker), len(REPLICA_CELLS)
        return [
            ReplicaCells(self, r, row[len(WORKER_CELLS) + r * n : len(WORKER_CELLS) + (r + 1) * n])
            for r in range(self.replicas)
        ]

    def clear_live(self, worker: int) -> None:
        """Forget what a worker that is gone held: its pid, generations and in-flight counts (not its counters)."""
        row = self.row(worker)
        for i in range(len(WORKER_CELLS)):
            row[i] = 0
        for r in range(self.replicas):
            base = len(WORKER_CELLS) + r * len(REPLICA_CELLS)
            for cell in _LIVE_REPLICA_CELLS:
                row[base + REPLICA_CELLS.index(cell)] = 0

    def close(self) -> None:
        """Unmap the board, unless rows handed out are still in use (then it goes with the last of them)."""
        self._cells.release()
        with contextlib.suppress(BufferError):
            self._map.close()


class ReplicaCells:
    """One worker's cells for one replica (``own[i]`` is ``REPLICA_CELLS[i]``), and the totals over workers."""

    __slots__ = ("_board", "index", "own")

    def __init__(self, board: Board, index: int, own: memoryview) -> None:
        self._board, self.index, self.own = board, index, own

    def total(self, cell: str) -> int:
        return self._board.replica_total(self.index, cell)

    def healthy_everywhere(self) -> bool:
        """Whether every running worker sees the replica up (one that found it failing has marked it down)."""
        return self.total("healthy") >= self._board.running()


class Seat:
    """One worker's place on its server's board: the board, and which row is its own."""

    __slots__ = ("board", "worker")

    def __init__(self, board: Board, worker: int) -> None:
        board.row(worker)  # a row that exists
        self.board, self.worker = board, worker

    @property
    def row(self) -> memoryview:
        return self.board.row(self.worker)

    def generations(self) -> memoryview:
        """This worker's (running, queued) cells."""
        start = WORKER_CELLS.index("active")
        return self.row[start : start + 2]
