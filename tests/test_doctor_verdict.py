"""Timing verdicts from synthetic timelines: hops simulated from their mechanism (a buffer that releases when
full, a body held to the end, a first-byte hold), noise drawn with fixed seeds, clocks offset at random."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenrelay.doctor._verdict import RelayKind, judge_arrivals, judge_relay

CADENCE = 50.0


def schedule(n: int, seed: int, cadence: float = CADENCE) -> tuple[list[float], list[int]]:
    """Send times (ms, server clock, a little late as a real event loop is) and random write sizes."""
    rng = random.Random(seed)
    sends = [i * cadence + rng.uniform(0.0, 2.0) for i in range(n)]
    sizes = [rng.randint(1, 600) for _ in range(n)]
    return sends, sizes


def passthrough(sends: Sequence[float], seed: int, jitter: float = 8.0, offset: float = 0.0) -> list[float]:
    """Every write goes straight through: a fixed latency (and clock offset) plus seeded noise."""
    rng = random.Random(seed)
    arrivals, last = [], float("-inf")
    for s in sends:
        last = max(last, s + offset + 2.0 + rng.expovariate(1.0 / jitter))  # TCP keeps order
        arrivals.append(last)
    return arrivals


def buffered(sends: Sequence[float], sizes: Sequence[int], buffer: int, offset: float = 0.0) -> list[float]:
    """A proxy buffer: bytes leave when ``buffer`` bytes are held, the rest when the stream ends."""
    arrivals: list[float | None] = [None] * len(sends)
    held: list[int] = []
    filled = 0
    for i, (s, size) in enumerate(zip(sends, sizes, strict=True)):
        held.append(i)
        filled += size
        if filled >= buffer:
            for j in held:
                arrivals[j] = s + offset + 1.0
            held, filled = [], 0
    for j in held:
        arrivals[j] = sends[-1] + offset + 1.0
    return [a for a in arrivals if a is not None]


def lump(sends: Sequence[float], offset: float = 0.0) -> list[float]:
    return [sends[-1] + offset + 3.0] * len(sends)


def initial_hold(sends: Sequence[float], until: float, offset: float = 0.0) -> list[float]:
    """Nothing leaves before ``until`` ms, then everything streams."""
    return [max(s, until) + offset + 1.0 for s in sends]


@pytest.mark.parametrize("seed", range(20))
def test_noisy_passthrough_is_streaming(seed: int) -> None:
    sends, sizes = schedule(60, seed)
    relay = judge_relay(sends, passthrough(sends, seed, offset=random.Random(seed).uniform(-5e6, 5e6)), sizes)
    assert relay.kind is RelayKind.STREAMING, relay.describe()
    assert relay.groups.count(1) >= 50


def test_occasional_stalls_are_tolerated_but_frequent_ones_are_irregular() -> None:
    sends, sizes = schedule(60, 1)
    arrivals = passthrough(sends, 1)
    stalled = list(arrivals)
    for i in (10, 40):  # two writes stuck behind a 120 ms hiccup (a GC pause, a busy core)
        stalled[i] += 120.0
        stalled[i + 1] = max(stalled[i + 1], stalled[i] + 1.0)
    assert judge_relay(sends, stalled, sizes).kind is RelayKind.STREAMING
    for i in range(0, 60, 10):  # every tenth write stuck for 160 ms, holding up the three after it
        arrivals[i] += 160.0
    arrivals = [max(arrivals[: i + 1]) for i in range(60)]  # TCP keeps order
    relay = judge_relay(sends, arrivals, sizes)
    assert relay.kind is RelayKind.IRREGULAR and 0.25 <= relay.coalesced < 0.35, relay.describe()


@pytest.mark.parametrize("buffer", [1024, 2048, 4096])
@pytest.mark.parametrize("seed", range(5))
def test_a_buffer_releasing_when_full_is_bursts_of_its_size(buffer: int, seed: int) -> None:
    sends, sizes = schedule(80, seed)
    relay = judge_relay(sends, buffered(sends, sizes, buffer, offset=1e6), sizes)
    assert relay.kind is RelayKind.BURSTS, relay.describe()
    assert buffer * 0.6 <= relay.burst_bytes <= buffer * 2.0
    assert relay.burst_items >= 2 and relay.max_hold_ms >= CADENCE
    assert relay.describe().startswith(f"bursts of {relay.burst_items} (")


def test_a_buffer_larger_than_the_stream_is_one_lump() -> None:
    sends, sizes = schedule(40, 2)
    for arrivals in (lump(sends, offset=-3e3), buffered(sends, sizes, 10**9)):
        relay = judge_relay(sends, arrivals, sizes)
        assert relay.kind is RelayKind.LUMP
        assert relay.holds[0] == pytest.approx(sends[-1] - sends[0], abs=3.0)
        assert relay.describe().startswith("one lump at the end: 40 of 40")


def test_a_first_byte_hold_then_streaming_is_an_initial_hold() -> None:
    sends, sizes = schedule(60, 3)
    relay = judge_relay(sends, initial_hold(sends, until=675.0, offset=42.0), sizes)
    assert relay.kind is RelayKind.INITIAL_HOLD
    assert relay.groups[0] == 14 and relay.holds[0] == pytest.approx(675.0 - sends[0], abs=1.0)
    assert relay.describe().startswith("initial hold: the first 14 arrived together")


def test_too_few_or_too_close_sends_are_not_judged() -> None:
    sends, sizes = schedule(3, 0)
    assert judge_relay(sends, lump(sends), sizes).kind is RelayKind.UNMEASURED
    sends, sizes = schedule(30, 0, cadence=1.0)
    assert judge_relay(sends, lump(sends), sizes).kind is RelayKind.UNMEASURED
    assert judge_relay([], [], []).kind is RelayKind.UNMEASURED
    with pytest.raises(ValueError):
        judge_relay([0.0], [1.0, 2.0], [1])


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    offset=st.floats(-1e9, 1e9),
    kind=st.sampled_from(["pass", "buffer", "lump", "hold"]),
    cadence=st.sampled_from([20.0, 50.0, 100.0, 400.0]),
)
def test_clock_offset_and_latency_change_nothing(seed: int, offset: float, kind: str, cadence: float) -> None:
    sends, sizes = schedule(50, seed, cadence)
    arrivals = {
        "pass": lambda: passthrough(sends, seed, jitter=cadence / 10),
        "buffer": lambda: buffered(sends, sizes, 2048),
        "lump": lambda: lump(sends),
        "hold": lambda: initial_hold(sends, until=sends[20]),
    }[kind]()
    base = judge_relay(sends, arrivals, sizes)
    shifted = judge_relay(sends, [a + offset for a in arrivals], sizes)
    assert shifted.kind is base.kind and shifted.groups == base.groups
    assert shifted.holds == pytest.approx(base.holds, abs=1e-3)
    expected = {"pass": RelayKind.STREAMING, "buffer": RelayKind.BURSTS, "lump": RelayKind.LUMP}
    if kind in expected:
        assert base.kind is expected[kind], base.describe()


def test_arrivals_only_streaming_bursts_and_lump() -> None:
    rng = random.Random(5)
    steady = [i * 20.0 + rng.uniform(0, 4) for i in range(50)]
    assert judge_arrivals(steady, [100] * 50).kind is RelayKind.STREAMING
    bursts = [(i // 8) * 300.0 for i in range(48)]  # eight events per read, every 300 ms
    relay = judge_arrivals(bursts, [100] * 48)
    assert relay.kind is RelayKind.BURSTS and relay.burst_items == 8 and relay.burst_period_ms == 300.0
    relay = judge_arrivals([2000.0] * 30, [100] * 30)
    assert relay.kind is RelayKind.LUMP and "30 of 30" in relay.describe()
    assert judge_arrivals([1.0, 2.0], [1, 1]).kind is RelayKind.UNMEASURED
    assert judge_arrivals([], []).kind is RelayKind.UNMEASURED
    assert judge_arrivals([0.0] * 6, [1] * 6).kind is not RelayKind.LUMP  # under 8 events: no lump verdict
