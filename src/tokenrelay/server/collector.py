"""The server's cyclic garbage collector while it runs (``ServerConfig.tune_gc``): what exists at startup frozen,
full passes rarer; restored at shutdown (``app.create_app``'s lifespan)."""

from __future__ import annotations

import gc

__all__ = ["FULL_PASS_EVERY", "restore_collector", "tune_collector"]

#: Full passes of the cyclic collector come after this many passes over the middle generation (CPython's
#: default is 10); see tune_collector.
FULL_PASS_EVERY = 100


def tune_collector() -> tuple[int, ...]:
    """Freeze what exists at startup and make the collector's full passes rarer; returns the old thresholds.

    A full pass walks every tracked object, and while it walks no stream sends: with 1,000 streams opening
    within a second, CPython's defaults ran two to five of them, 80–140 ms each, and they made the tail of the
    inter-token gaps (benchmarks/server_load.py prints them). Two changes, undone at shutdown:

    * ``gc.freeze()`` after a collection: what exists at startup (modules, routes, the engine, the tokenizer
      and its tables: 60,000 objects and more) lives as long as the server, so no pass walks it. Frozen
      objects are still freed by reference counting; only a cycle among them would wait for shutdown.
    * a full pass after ``FULL_PASS_EVERY`` middle passes instead of 10. Young cycles are still collected as
      often as before; what a full pass could free is garbage that survived two younger passes, and the
      request path makes none (every request's objects are freed by reference counting when it ends,
      tests/test_server_gc.py).

    ``ServerConfig(tune_gc=False)`` leaves the collector alone, for an app mounted in a larger process that
    manages its own.
    """
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    young, middle, full = thresholds
    gc.set_threshold(young, middle, max(full, FULL_PASS_EVERY))
    return thresholds


def restore_collector(thresholds: tuple[int, ...]) -> None:
    """Undo :func:`tune_collector`: nothing frozen, the thresholds it returned."""
    gc.unfreeze()
    gc.set_threshold(*thresholds)
