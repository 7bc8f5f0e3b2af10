"""The workers' shared board: rows, totals, what a gone worker leaves, and upstream engines counting through it.

Two ``Board`` objects on one file are two real mappings of the same pages, as two worker processes have;
the engines' routing is checked against real replica servers over uvicorn sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from _uvicorn import serve
from server_helpers import replay_app
from tokenrelay import load_tokenizer
from tokenrelay.engines.base import SamplingParams, Step
from tokenrelay.engines.replicas import REPLICA_CELLS, SharedReplica
from tokenrelay.engines.upstream import UpstreamEngine
from tokenrelay.server.board import WORKER_CELLS, Board, Seat

TEXT = "Shared ☕ counts 🦙 नमस्ते. " * 40


def test_rows_are_seen_by_every_mapping_and_totals_count_running_workers(tmp_path: Path) -> None:
    parent = Board.create(tmp_path / "board", workers=3, replicas=2)
    worker = Board(tmp_path / "board", workers=3, replicas=2)
    assert parent.width == len(WORKER_CELLS) + 2 * len(REPLICA_CELLS)
    row = worker.row(1)
    row[0], row[2], row[3] = 4242, 5, 7  # pid, active, queued
    assert parent.running() == 1 and parent.total("active") == 5 and parent.total("queued") == 7
    assert parent.worker_states() == [{"worker": 1, "pid": 4242, "ready": 0, "active": 5, "queued": 7}]
    other = worker.row(2)
    other[0], other[2] = 99, 1
    assert parent.total("active") == 6
    cells = worker.replica_cells(1)[1].own
    cells[REPLICA_CELLS.index("active")], cells[REPLICA_CELLS.index("tokens")] = 3, 1000
    assert parent.replica_total(1, "active") == 3 and parent.replica_total(1, "tokens") == 1000
    assert parent.replica_total(0, "tokens") == 0
    parent.clear_live(1)  # worker 1 died: its live state goes, its counters stay
    assert parent.running() == 1 and parent.total("active") == 1
    assert parent.replica_total(1, "active") == 0 and parent.replica_total(1, "tokens") == 1000
    worker.close()
    parent.close()


def test_a_board_of_another_shape_is_refused(tmp_path: Path) -> None:
    Board.create(tmp_path / "board", workers=2, replicas=1).close()
    with pytest.raises(ValueError, match="not a board of 3 workers"):
        Board(tmp_path / "board", workers=3, replicas=1)
    board = Board(tmp_path / "board", workers=2, replicas=1)
    with pytest.raises(IndexError):
        board.row(2)
    with pytest.raises(IndexError):
        Seat(board, 5)
    board.close()


def test_a_shared_replica_counts_into_its_row_and_reads_everyones(tmp_path: Path) -> None:
    board = Board.create(tmp_path / "board", workers=2, replicas=1)
    for worker in (0, 1):
        board.row(worker)[0] = 100 + worker  # both running
    a = SharedReplica("http://a", board.replica_cells(0)[0])
    b = SharedReplica("http://a", board.replica_cells(1)[0])
    a.active += 1
    a.requests += 1
    b.active += 2
    b.tokens += 7
    assert (a.active, b.active) == (1, 2)  # each its own
    assert a.load() == b.load() == 3 and a.total("requests") == 1 and b.total("tokens") == 7
    assert a.up() and b.up()
    b.down("refused")
    assert not b.healthy and a.healthy and not a.up()  # one worker saw it fail: down for the server
    assert b.total("failures") == 1
    board.clear_live(1)
    again = SharedReplica("http://a", board.replica_cells(1)[0])  # worker 1's replacement
    assert again.active == 0 and again.healthy and again.tokens == 7  # live state anew, counters go on
    board.close()


async def _first_step(steps: AsyncIterator[Step]) -> None:
    async for _ in steps:
        return


def test_two_workers_engines_pick_the_least_loaded_replica_of_the_whole_server(tmp_path: Path) -> None:
    """Four streams, alternating between two workers' engines: each pick counts the other worker's streams,
    so the replicas end with two each (each engine alone would have sent both of its first streams to the
    same replica, as its own counts were equal)."""
    board = Board.create(tmp_path / "board", workers=2, replicas=2)
    with ExitStack() as stack:
        urls = [stack.enter_context(serve(replay_app(TEXT, rate=20.0)[0])) for _ in range(2)]

        async def run() -> tuple[list[int], list[int]]:
            engines = []
            for worker in (0, 1):
                board.row(worker)[0] = 1000 + worker
                engine = UpstreamEngine(urls, load_tokenizer("smollm2"), model="replay", health_interval=0)
                engine.share_counts(board.replica_cells(worker))
                engines.append(engine)
            streams = []
            try:
                for i in range(4):
                    engine = engines[i % 2]
                    ids = engine.prompt_ids("go")
                    steps = engine.generate("go", SamplingParams(max_tokens=200), prompt_ids=ids)
                    await _first_step(steps)  # streaming now: in flight on its replica
                    streams.append(steps)
                    spread.append(sorted(r.load() for r in engines[0].replicas))
                loads = [r.load() for r in engines[0].replicas]
                own = [sum(r.active for r in e.replicas) for e in engines]
                replicas_seen = []
                async with httpx.AsyncClient() as client:
                    for url in urls:  # the replicas' own view of what runs on them
                        replicas_seen.append((await client.get(url + "/health")).json()["active"])
                assert replicas_seen == loads
                return loads, own
            finally:
                for steps in streams:
                    with contextlib.suppress(Exception):
                        await steps.aclose()  # type: ignore[attr-defined]
                for engine in engines:
                    await engine.aclose()

        spread: list[list[int]] = []
        loads, own = asyncio.run(run())
    assert spread == [[0, 1], [1, 1], [1, 2], [2, 2]]  # never two on one replica while the other has fewer
    assert loads == [2, 2] and own == [2, 2]
    assert board.replica_total(0, "requests") + board.replica_total(1, "requests") == 4
    board.close()
