"""What a relay did to a stream's timing, from recorded send and arrival times. Sans-I/O, standard library.

Two readings. :func:`judge_relay` has both ends of each write (the diagnostic stream reports when the server
sent every write; the probe saw when its last byte arrived), so it can say which writes a hop held and how.
:func:`judge_arrivals` has only the client's side (any OpenAI-compatible endpoint) and says less.

The two clocks are different machines' clocks, so no absolute delay is trusted. A write's *hold* is its
transit time minus the smallest transit time of any write in the stream: zero for the write that went
straight through, and how much longer every other write took. A constant latency is not buffering and
cancels out; a buffer shows as holds that grow until it is released.

Rules for :func:`judge_relay` (``c`` = median gap between sends; first rule that matches wins):

=================  ======================================================================================
coalesced gap      two consecutive writes, sent ``Δs`` apart, arrived less than ``max(2 ms, Δs / 4)``
                   apart: something held the first until the second was there
arrival group      a run of writes joined by coalesced gaps (one release of whatever held them)
tolerance ``T``    ``max(150 ms, 3c)``: holds below it are scheduling noise, even on a loaded 2-core box
UNMEASURED         fewer than 4 writes, or ``c < 5 ms``: sends too close together to tell a hold apart
LUMP               one group holds at least 90% of the writes (everything released at the end)
INITIAL_HOLD       the first group holds 2+ writes and the first write was held over ``2T``, and the rest
                   stream (under 20% coalesced gaps, 90th percentile hold under ``T``)
BURSTS             at least 35% of gaps coalesced and at least two groups of 2+ writes: a buffer released
                   each time it filled; reported as the median writes, bytes and period per group
IRREGULAR          at least 25% of gaps coalesced, or the 90th percentile hold over ``T``
STREAMING          otherwise: every write arrived on its own, about when it was sent
=================  ======================================================================================

Thresholds are ratios of the measured cadence wherever possible, so the same rules hold at 20 ms and 500 ms.
Streaming through nginx on a 2-core machine with three busy processes competing coalesced up to 10% of gaps
(a stalled client reads two writes at once: pairs, not runs); the smallest buffer worth noticing (one that
holds two writes) coalesces half of them, and nginx with 1 KiB buffers coalesced 72%.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from tokenrelay._stream import percentile

__all__ = ["Relay", "RelayKind", "judge_arrivals", "judge_relay"]

_MIN_CADENCE_MS = 5.0
_NOISE_MS = 150.0


class RelayKind(str, Enum):
    STREAMING = "streaming"
    BURSTS = "bursts"
    LUMP = "lump"
    INITIAL_HOLD = "initial_hold"
    IRREGULAR = "irregular"
    UNMEASURED = "unmeasured"


@dataclass(frozen=True)
class Relay:
    """The verdict and the numbers behind it. Times in milliseconds; ``holds`` is empty without send times."""

    kind: RelayKind
    items: int  # writes (judge_relay) or events (judge_arrivals)
    cadence_ms: float | None  # median gap between sends (judge_relay) or between arrival groups
    groups: tuple[int, ...]  # items per arrival group, in order
    group_bytes: tuple[int, ...]  # bytes per arrival group
    group_at_ms: tuple[float, ...]  # arrival time of each group
    coalesced: float  # fraction of gaps that were coalesced
    holds: tuple[float, ...] = ()  # per write: transit time minus the stream's smallest

    @property
    def burst_items(self) -> int:
        """The median group size (how many writes or events one release carried)."""
        return round(statistics.median(self.groups)) if self.groups else 0

    @property
    def burst_bytes(self) -> int:
        return round(statistics.median(self.group_bytes)) if self.group_bytes else 0

    @property
    def burst_period_ms(self) -> float | None:
        """The median time between releases, or None with fewer than two groups."""
        at = self.group_at_ms
        return statistics.median(b - a for a, b in itertools.pairwise(at)) if len(at) > 1 else None

    @property
    def max_hold_ms(self) -> float:
        return max(self.holds, default=0.0)

    @property
    def p90_hold_ms(self) -> float:
        return _quantile(self.holds, 0.9)

    def describe(self) -> str:
        """One line for the report."""
        n = self.items
        if self.kind is RelayKind.UNMEASURED:
            return f"{n} items: too few, or sent too close together, to judge the timing"
        if self.kind is RelayKind.LUMP:
            spread = self.group_at_ms[-1] - self.group_at_ms[0] if len(self.group_at_ms) > 1 else 0.0
            held = f", the first held {self.holds[0]:.0f} ms" if self.holds else ""
            return f"one lump at the end: {max(self.groups)} of {n} arrived together{held} (spread {spread:.0f} ms)"
        if self.kind is RelayKind.BURSTS:
            period = self.burst_period_ms
            every = f" every {period:.0f} ms" if period is not None else ""
            holds = f", holds up to {self.max_hold_ms:.0f} ms" if self.holds else ""
            return (
                f"bursts of {self.burst_items} ({_size(self.burst_bytes)}){every}: {len(self.groups)} releases "
                f"for {n} items{holds}"
            )
        if self.kind is RelayKind.INITIAL_HOLD:
            return (
                f"initial hold: the first {self.groups[0]} arrived together, the first held "
                f"{self.holds[0]:.0f} ms; the rest streamed"
            )
        every = "sent" if self.holds else "arriving"
        cadence = f" {every} every {self.cadence_ms:.0f} ms" if self.cadence_ms is not None else ""
        holds = f", holds p90 {self.p90_hold_ms:.0f} ms max {self.max_hold_ms:.0f} ms" if self.holds else ""
        if self.kind is RelayKind.IRREGULAR:
            return f"irregular: {self.coalesced:.0%} of {n - 1} gaps coalesced{holds}"
        return f"streaming: {len(self.groups)} arrivals for {n} items{cadence}{holds}"


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"≈{n / 1024:.1f} KiB"


def _quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) by the project's one percentile definition; 0 for no values."""
    p = percentile(values, q * 100)
    return 0.0 if p is None else p


def _groups(
    arrivals: Sequence[float], joined: Sequence[bool], sizes: Sequence[int]
) -> tuple[list[int], list[int], list[float]]:
    """Runs of items joined by ``joined[i]`` (item i and i+1 arrived together)."""
    counts, nbytes, at = [1], [sizes[0]], [arrivals[0]]
    for i, together in enumerate(joined):
        if together:
            counts[-1] += 1
            nbytes[-1] += sizes[i + 1]
            at[-1] = arrivals[i + 1]
        else:
            counts.append(1)
            nbytes.append(sizes[i + 1])
            at.append(arrivals[i + 1])
    return counts, nbytes, at


def judge_relay(sends_ms: Sequence[float], arrivals_ms: Sequence[float], sizes: Sequence[int]) -> Relay:
    """Judge a relay from each write's send time (server clock), arrival time (client clock) and size.

    The three sequences are per write, in send order; see the module docstring for the rules.
    """
    if not len(sends_ms) == len(arrivals_ms) == len(sizes):
        raise ValueError("sends, arrivals and sizes must have one entry per write")
    n = len(sends_ms)
    if n == 0:
        return Relay(RelayKind.UNMEASURED, 0, None, (), (), (), 0.0)
    transit = [a - s for s, a in zip(sends_ms, arrivals_ms, strict=True)]
    base = min(transit)
    holds = tuple(t - base for t in transit)
    send_gaps = [b - a for a, b in itertools.pairwise(sends_ms)]
    cadence = statistics.median(send_gaps) if send_gaps else None
    joined = [arrivals_ms[i + 1] - arrivals_ms[i] < max(2.0, gap / 4.0) for i, gap in enumerate(send_gaps)]
    counts, nbytes, at = _groups(arrivals_ms, joined, sizes)
    coalesced = sum(joined) / len(joined) if joined else 0.0

    def relay(kind: RelayKind) -> Relay:
        return Relay(kind, n, cadence, tuple(counts), tuple(nbytes), tuple(at), coalesced, holds)

    if n < 4 or cadence is None or cadence < _MIN_CADENCE_MS:
        return relay(RelayKind.UNMEASURED)
    tolerance = max(_NOISE_MS, 3.0 * cadence)
    if max(counts) >= 0.9 * n:
        return relay(RelayKind.LUMP)
    rest = joined[counts[0] :]  # the gaps after the first group
    if (
        counts[0] >= 2
        and holds[0] > 2.0 * tolerance
        and (not rest or sum(rest) / len(rest) < 0.2)
        and _quantile(holds[counts[0] :], 0.9) < tolerance
    ):
        return relay(RelayKind.INITIAL_HOLD)
    if coalesced >= 0.35 and sum(1 for c in counts if c >= 2) >= 2:
        return relay(RelayKind.BURSTS)
    if coalesced >= 0.25 or _quantile(holds, 0.9) > tolerance:
        return relay(RelayKind.IRREGULAR)
    return relay(RelayKind.STREAMING)


def judge_arrivals(arrivals_ms: Sequence[float], sizes: Sequence[int]) -> Relay:
    """Judge from arrival times alone (one per event, client clock), for endpoints without send times.

    Without send times a hop's buffer and a server that batches its own output look the same, so this says
    only what arrived: LUMP when one group (events less than 3 ms apart) holds 90% of 8 or more events,
    BURSTS when the median group holds 3+ events over 3+ groups, STREAMING otherwise; UNMEASURED under 4.
    """
    if len(arrivals_ms) != len(sizes):
        raise ValueError("arrivals and sizes must have one entry per event")
    n = len(arrivals_ms)
    if n == 0:
        return Relay(RelayKind.UNMEASURED, 0, None, (), (), (), 0.0)
    joined = [b - a < 3.0 for a, b in itertools.pairwise(arrivals_ms)]
    counts, nbytes, at = _groups(arrivals_ms, joined, sizes)
    coalesced = sum(joined) / len(joined) if joined else 0.0
    gaps = [b - a for a, b in itertools.pairwise(at)]
    cadence = statistics.median(gaps) if gaps else None
    relay = Relay(RelayKind.STREAMING, n, cadence, tuple(counts), tuple(nbytes), tuple(at), coalesced)
    if n < 4:
        return replace(relay, kind=RelayKind.UNMEASURED)
    if n >= 8 and max(counts) >= 0.9 * n:
        return replace(relay, kind=RelayKind.LUMP)
    if len(counts) >= 3 and statistics.median(counts) >= 3:
        return replace(relay, kind=RelayKind.BURSTS)
    return relay
