"""The continuous-batching planner (sans I/O): which tokens of which sequences each decode step carries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenrelay.engines._batching import BatchEntry, Slot, plan_step


def test_generating_slots_carry_their_last_token_and_sample() -> None:
    a = Slot(0, [1, 2, 3], limit=5)
    a.fed = 3
    a.sampled = [7]
    b = Slot(1, [4, 5], limit=5)
    b.fed = 2
    b.sampled = [8, 9]
    entries, sampling = plan_step([a, b], prefill_chunk=16, n_batch=64)
    assert entries == [BatchEntry(7, 3, 0, True), BatchEntry(9, 3, 1, True)]
    assert sampling == [a, b]


def test_a_prompt_is_read_in_chunks_and_samples_on_its_last_token() -> None:
    running = Slot(0, [1], limit=50)
    running.fed = 1
    running.sampled = [5]
    new = Slot(1, list(range(100, 110)), limit=3)
    steps = []
    while new.prefilling:
        entries, sampling = plan_step([running, new], prefill_chunk=4, n_batch=64)
        steps.append(entries)
        # the running stream is in every step: a new prompt never stalls it for more than one chunk
        assert entries[0] == BatchEntry(
            running.sampled[-1], len(running.prompt) + len(running.sampled) - 1, 0, True
        )
        for slot in sampling:
            slot.accept(42)
    assert [len(s) for s in steps] == [5, 5, 3]
    prompt_entries = [e for s in steps for e in s if e.seq == 1]
    assert [e.token for e in prompt_entries] == new.prompt
    assert [e.pos for e in prompt_entries] == list(range(10))
    assert [e.logits for e in prompt_entries] == [False] * 9 + [True]
    assert new.sampled == [42]  # sampled from the step that fed its last prompt token


def test_oldest_prompt_first_and_the_budget_is_shared() -> None:
    first, second = Slot(0, [1] * 3, limit=1), Slot(1, [2] * 3, limit=1)
    entries, sampling = plan_step([first, second], prefill_chunk=4, n_batch=64)
    assert [e.seq for e in entries] == [0, 0, 0, 1]
    assert sampling == [first]
    assert (first.fed, second.fed) == (3, 1)


def test_n_batch_caps_the_whole_step() -> None:
    slots = []
    for seq in range(3):
        slot = Slot(seq, [1], limit=9)
        slot.fed, slot.sampled = 1, [3]
        slots.append(slot)
    waiting = Slot(3, [5] * 10, limit=1)
    entries, _ = plan_step([*slots, waiting], prefill_chunk=100, n_batch=5)
    assert len(entries) == 5 and waiting.fed == 2


def test_done_slots_are_left_out() -> None:
    stop = Slot(0, [1], limit=9, stop_ids=frozenset({2}))
    stop.fed, stop.sampled = 1, [2]
    full = Slot(1, [1], limit=1)
    full.fed, full.sampled = 1, [5]
    assert stop.done and full.done
    assert plan_step([stop, full], prefill_chunk=4, n_batch=8) == ([], [])
    with pytest.raises(RuntimeError):
        stop.accept(3)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        Slot(0, [], limit=1)
    with pytest.raises(ValueError):
        Slot(0, [1], limit=0)
    with pytest.raises(ValueError):
        plan_step([], prefill_chunk=0, n_batch=1)


@settings(max_examples=200, deadline=None)
@given(
    requests=st.lists(
        st.tuples(st.integers(1, 40), st.integers(1, 12), st.integers(0, 6)), min_size=1, max_size=8
    ),
    chunk=st.integers(1, 16),
    n_batch=st.integers(8, 32),
)
def test_every_request_is_fed_in_order_and_sampled_to_its_limit(
    requests: list[tuple[int, int, int]], chunk: int, n_batch: int
) -> None:
    """Requests arrive at different steps; run the planner with a fake decode until every slot is done."""
    pending = [
        Slot(seq, [seq * 1000 + p for p in range(n)], limit=limit)
        for seq, (n, limit, _) in enumerate(requests)
    ]
    arrival = {slot.seq: at for slot, (_, _, at) in zip(pending, requests, strict=True)}
    fed: dict[int, list[BatchEntry]] = {slot.seq: [] for slot in pending}
    step = 0
    while any(not slot.done for slot in pending):
        active = [slot for slot in pending if arrival[slot.seq] <= step]
        generating_before = [s for s in active if not s.prefilling and not s.done]
        entries, sampling = plan_step(active, prefill_chunk=chunk, n_batch=n_batch)
        assert len(entries) <= n_batch
        assert sum(1 for e in entries if e.pos < len(pending[e.seq].prompt)) <= max(chunk, 0) + len(
            generating_before
        )
        if len(generating_before) <= n_batch:  # nobody generating is skipped
            assert {e.seq for e in entries if e.logits} >= {s.seq for s in generating_before}
        assert [e.logits for e in entries].count(True) == len(sampling)
        for entry in entries:
            fed[entry.seq].append(entry)
        for slot in sampling:
            slot.accept(-slot.seq - 1)
        step += 1
        assert step < 10_000
    for slot in pending:
        prompt_part = [e for e in fed[slot.seq] if e.pos < len(slot.prompt)]
        assert [e.token for e in prompt_part] == list(slot.prompt)
        assert [e.pos for e in fed[slot.seq]] == list(range(len(fed[slot.seq])))
        assert len(slot.sampled) == slot.limit
