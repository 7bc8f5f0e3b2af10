"""The diagnostic payload: a pure function of its parameters, cut into writes that cover it exactly, and a
schedule that round-trips and refuses to describe another body."""

from __future__ import annotations

import hashlib
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenrelay.doctor._payload import (
    EOLS,
    MODEL,
    SAMPLE,
    DiagnosticPlan,
    Schedule,
    event_text,
    parse_schedule,
)
from tokenrelay.doctor._recording import naive_event_count
from tokenrelay.wire._sse import SSEParser


def plan(**kw: object) -> DiagnosticPlan:
    args: dict[str, object] = {"stream": "s1", "seed": 7, "events": 12, "cadence_ms": 50.0, "eol": "crlf"}
    args.update(kw)
    return DiagnosticPlan(**args)  # type: ignore[arg-type]


def test_the_sample_holds_what_breaks_relays() -> None:
    for needle in (
        "🦙",
        "👩\u200d💻",
        "🙏🏽",
        "。",
        "\u094d",
        "e\u0301",
        "\ufffd",
    ):  # virama: Devanagari conjuncts
        assert needle in SAMPLE
    assert max(len(ch.encode()) for ch in SAMPLE) == 4


@pytest.mark.parametrize("eol", list(EOLS))
def test_body_parses_to_the_known_events_at_every_cut(eol: str) -> None:
    p = plan(eol=eol)
    assert EOLS[eol] * 2 in p.body.decode()
    parser = SSEParser()
    events = [e for offset, size in p.cuts for e in parser.feed(p.body[offset : offset + size])]
    parser.close()
    assert not parser.truncated
    assert [e.id for e in events] == [str(k) for k in range(p.events)]
    for k, event in enumerate(events):
        chunk = json.loads(event.data)
        assert chunk["object"] == "chat.completion.chunk" and chunk["model"] == MODEL
        assert chunk["choices"][0]["delta"]["content"] == event_text(k) == f"[{k}] {SAMPLE}"
    # Only LF framing survives a client that splits on "\n\n".
    assert naive_event_count(p.body) == (p.events if eol == "lf" else 0)


def test_bytes_depend_on_stream_seed_events_eol_but_not_cadence() -> None:
    assert plan().body == plan(cadence_ms=500.0).body and plan().cuts == plan(cadence_ms=0.0).cuts
    assert plan().body == plan(seed=8).body and plan().cuts != plan(seed=8).cuts
    assert plan().body != plan(stream="s2").body
    assert plan().body != plan(eol="lf").body
    assert plan(events=3).body == plan(events=12).body[: len(plan(events=3).body)]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), events=st.integers(1, 40), eol=st.sampled_from(list(EOLS)))
def test_cuts_cover_the_body_exactly_once(seed: int, events: int, eol: str) -> None:
    p = plan(seed=seed, events=events, eol=eol)
    assert len(p.cuts) == events + 1  # the opening comment, then the events' random cuts
    assert p.body[: p.cuts[0][1]] == f": stream open{EOLS[eol] * 2}".encode()
    position = 0
    for offset, size in p.cuts:
        assert offset == position and size >= 1
        position += size
    assert position == len(p.body)
    assert p.cuts == plan(seed=seed, events=events, eol=eol).cuts  # seeded: the same every time


def test_cut_counts_match_a_brute_force_oracle() -> None:
    for seed in range(20):
        p = plan(seed=seed, events=30)
        inside = crlf = 0
        for offset, _ in p.cuts[1:]:
            try:
                p.body[:offset].decode("utf-8")
            except UnicodeDecodeError:
                inside += 1
            crlf += p.body[offset - 1 : offset + 1] == b"\r\n"
        assert (p.cuts_inside_characters(), p.cuts_inside_crlf()) == (inside, crlf)
    # Over a few seeds, cuts do land inside characters and inside CRLFs: the payload is doing its job.
    assert sum(plan(seed=s, events=60).cuts_inside_characters() for s in range(5)) > 0
    assert sum(plan(seed=s, events=60).cuts_inside_crlf() for s in range(20)) > 0


@pytest.mark.parametrize(
    "bad",
    [
        {"stream": ""},
        {"stream": "a b"},
        {"stream": "é"},
        {"stream": "x" * 65},
        {"events": 0},
        {"events": 100_001},
        {"cadence_ms": -1.0},
        {"cadence_ms": 10_001.0},
        {"eol": "crcr"},
    ],
)
def test_plan_refuses_bad_parameters(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        plan(**bad)


def test_query_asks_for_the_same_plan() -> None:
    p = plan(stream="abc-1", seed=99, events=5, cadence_ms=12.5, eol="cr")
    q = p.query()
    again = DiagnosticPlan(q["stream"], int(q["seed"]), int(q["events"]), float(q["cadence_ms"]), q["eol"])
    assert again == p


def test_schedule_round_trips_through_the_trailer() -> None:
    p = plan(events=4)
    writes = tuple((i * 50.0 + 0.25, offset, size) for i, (offset, size) in enumerate(p.cuts))
    schedule = Schedule(p, writes)
    parser = SSEParser()
    events = parser.feed(p.trailer(schedule)) + parser.close()
    assert [e.event for e in events] == ["schedule", "message"] and events[1].data == "[DONE]"
    assert parse_schedule(events[0].data) == schedule
    obj = schedule.to_json()
    assert obj["bytes"] == len(p.body) and obj["sha256"] == hashlib.sha256(p.body).hexdigest()
    assert parse_schedule(obj) == schedule  # the status endpoint's mapping form


def test_schedule_for_part_of_the_writes_is_valid() -> None:
    p = plan(events=6)
    partial = Schedule(p, tuple((float(i), o, s) for i, (o, s) in enumerate(p.cuts[:2])))
    assert parse_schedule(json.dumps(partial.to_json())).writes == partial.writes


def test_schedule_that_lies_is_refused() -> None:
    p = plan(events=3)
    good = Schedule(p, tuple((0.0, o, s) for o, s in p.cuts)).to_json()
    for field, value in [("sha256", "0" * 64), ("bytes", 1), ("writes", [[0.0, 0, 1]]), ("seed", 8)]:
        with pytest.raises(ValueError):
            parse_schedule({**good, field: value})
    del good["eol"]
    with pytest.raises(ValueError):
        parse_schedule(good)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=200), st.binary(max_size=100).map(lambda b: b.decode("latin-1"))))
def test_parse_schedule_fuzz_gives_a_schedule_or_value_error(data: str) -> None:
    outcome(data)


def outcome(data: str | dict[str, object]) -> Schedule | None:
    """The fuzz invariant: a schedule that describes its own plan's body, or ValueError; nothing else."""
    try:
        schedule = parse_schedule(data)
    except ValueError as exc:
        assert str(exc)
        return None
    assert schedule.to_json()["sha256"] == hashlib.sha256(schedule.plan.body).hexdigest()
    return schedule


def test_parse_schedule_fuzz_with_json_shapes() -> None:
    rng = random.Random(3)
    p = plan(events=2)
    good = Schedule(p, tuple((float(i), o, n) for i, (o, n) in enumerate(p.cuts))).to_json()
    assert outcome(good) is not None
    values: list[object] = [None, 1, -1, 1.5, "x", [], {}, [[1, 2]], [["a", "b", "c"]], True]
    for _ in range(300):
        mutated = dict(good)
        key = rng.choice(list(good))
        mutated[key] = rng.choice(values)
        parsed = outcome(mutated)
        if key in ("stream", "seed", "bytes", "sha256") and mutated[key] != good[key]:
            assert parsed is None  # these change the body the schedule claims to describe
