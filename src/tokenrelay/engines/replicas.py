"""The replicas of an upstream engine and their numbers (``engines.upstream``).

``Replica`` is one upstream server: whether it is healthy, its requests in flight, and counters (requests,
failures, retries away from it, tokens, cancellations). In one process they are plain attributes. With
several worker processes (``serve --workers N``) each worker's replicas are ``SharedReplica``: the same
attributes, stored in this worker's cells of a table every worker maps (``server.board``), so ``load()``,
``total()`` and ``up()`` are the whole server's and the least-loaded pick counts every worker's requests.
``ReplicaCollector`` turns them into Prometheus series.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = ["REPLICA_CELLS", "Replica", "ReplicaCollector", "SharedCells", "SharedReplica"]


@dataclass(eq=False)
class Replica:
    """One upstream server and what happened on it."""

    url: str
    healthy: bool = True
    active: int = 0
    requests: int = 0
    failures: int = 0
    retried_away: int = 0
    tokens: int = 0
    cancelled: int = 0
    last_error: str = ""

    def down(self, reason: str) -> None:
        self.healthy = False
        self.failures += 1
        self.last_error = reason

    def load(self) -> int:
        """Requests in flight on the replica (from this process; a ``SharedReplica``'s from every worker)."""
        return self.active

    def total(self, name: str) -> int:
        """A counter of ``REPLICA_CELLS`` for the whole server (here: this process)."""
        value: int = getattr(self, name)
        return value

    def up(self) -> bool:
        """Healthy, as the whole server sees it."""
        return self.healthy


#: A replica's numbers as ``SharedReplica`` keeps them in a shared row; the first two are live state (cleared
#: when a worker goes), the others counters.
REPLICA_CELLS = ("active", "healthy", "requests", "failures", "retried_away", "tokens", "cancelled")


class SharedCells(typing.Protocol):
    """One worker's cells for one replica in a table all workers map (``server.board.ReplicaCells``)."""

    @property
    def own(self) -> memoryview: ...  # this worker's cells, in ``REPLICA_CELLS`` order

    def total(self, cell: str) -> int: ...  # summed over the workers

    def healthy_everywhere(self) -> bool: ...


def _cell(index: int) -> property:
    def get(self: SharedReplica) -> int:
        value: int = self._own[index]
        return value

    def put(self: SharedReplica, value: int) -> None:
        self._own[index] = int(value)

    return property(get, put)


class SharedReplica(Replica):
    """A replica whose numbers are this worker's cells of a table the server's workers share: written here as
    they change (the code that counts is the same), summed over every worker by ``load``, ``total``, ``up``."""

    active = _cell(0)
    healthy = _cell(1)
    requests = _cell(2)
    failures = _cell(3)
    retried_away = _cell(4)
    tokens = _cell(5)
    cancelled = _cell(6)

    def __init__(self, url: str, cells: SharedCells) -> None:
        self._cells, self._own = cells, cells.own
        # A worker's counters go on from what its row holds (a replaced worker's); its live state starts anew.
        super().__init__(
            url,
            healthy=True,
            active=0,
            requests=self.requests,
            failures=self.failures,
            retried_away=self.retried_away,
            tokens=self.tokens,
            cancelled=self.cancelled,
        )

    def load(self) -> int:
        return self._cells.total("active")

    def total(self, name: str) -> int:
        return self._cells.total(name)

    def up(self) -> bool:
        return self._cells.healthy_everywhere()


class _HasReplicas(typing.Protocol):
    @property
    def replicas(self) -> Sequence[Replica]: ...


class ReplicaCollector:
    """The per-replica numbers as Prometheus series (the server registers it on its metrics)."""

    def __init__(self, engine: _HasReplicas) -> None:
        self._engine = engine  # its replicas as they are at each scrape (share_counts replaces them)

    def collect(self) -> Iterator[object]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        counters = {
            "requests": "Requests sent to the replica",
            "failures": "Requests or health checks that failed on the replica",
            "retried_away": "Requests moved to another replica after failing here before a token",
            "tokens": "Token ids relayed from the replica",
            "cancelled": "Requests on the replica closed before it finished them (the client left, or a stop "
            "string ended the reply)",
        }
        for name, doc in counters.items():
            family = CounterMetricFamily(f"tokenrelay_upstream_{name}", doc, labels=["replica"])
            for r in self._engine.replicas:
                family.add_metric([r.url], r.total(name))
            yield family
        active = GaugeMetricFamily("tokenrelay_upstream_active", "Requests in flight", labels=["replica"])
        up = GaugeMetricFamily("tokenrelay_upstream_up", "1 if the replica is healthy", labels=["replica"])
        for r in self._engine.replicas:
            active.add_metric([r.url], r.load())
            up.add_metric([r.url], 1 if r.up() else 0)
        yield active
        yield up
