"""A bounded number of concurrent generations and a bounded queue in front of them.

``enter()`` is called before the response starts: when the queue is full it raises ``RateLimitError`` (429
with ``Retry-After``), so a refused request never begins a stream. An admitted request then waits for a slot
inside its stream (the stream sends keep-alive comments meanwhile) and releases it when it ends, however it
ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tokenrelay._errors import RateLimitError

from .metrics import ServerMetrics

__all__ = ["Admission"]


class Admission:
    def __init__(
        self,
        max_active: int,
        max_queued: int,
        metrics: ServerMetrics,
        retry_after: float = 1.0,
        *,
        shared: memoryview | None = None,
    ) -> None:
        """``shared``: two cells (running, queued) where a worker of several shows its counts to the others
        (``server.board``); its limits are its own."""
        if max_active < 1 or max_queued < 0:
            raise ValueError("max_active must be ≥ 1 and max_queued ≥ 0")
        self.max_active = max_active
        self.max_queued = max_queued
        self._slots = asyncio.Semaphore(max_active)
        self._metrics = metrics
        self._retry_after = retry_after
        self.active = 0
        self.waiting = 0
        self._shared = shared
        # Read when /metrics is scraped, not written on every change: nothing on the request path.
        metrics.watch(lambda: self.active, lambda: self.waiting)

    def enter(self) -> None:
        """Reserve a place (running or queued), or raise 429 when there is none."""
        if self.active + self.waiting >= self.max_active + self.max_queued:
            self._metrics.rejected.inc()
            raise RateLimitError(
                f"server busy: {self.active} generations running and {self.waiting} queued; retry later",
                retry_after=self._retry_after,
                code="server_busy",
            )
        self.waiting += 1
        self._show()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Wait for a slot (after ``enter()``), hold it for the body of the ``async with``."""
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
            self._show()  # also when the wait was cancelled
        self.active += 1
        self._show()
        try:
            yield
        finally:
            self.active -= 1
            self._slots.release()
            self._show()

    def leave_unstarted(self) -> None:
        """Give back a place reserved by ``enter()`` whose stream never asked for its slot."""
        self.waiting -= 1
        self._show()

    def _show(self) -> None:
        if self._shared is not None:
            self._shared[0], self._shared[1] = self.active, self.waiting
