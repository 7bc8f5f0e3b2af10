"""The continuous-batching planner (sans I/O): which sequence a request takes (the prefix cache), and which
tokens of which sequences each decode step carries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenrelay.engines._batching import (
    MIN_COPY,
    BatchEntry,
    SequencePool,
    Slot,
    common_prefix,
    plan_step,
)


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
    assert [len(s) for s in steps] == [5, 5, 2, 2]  # the last prompt token in a step of its own
    prompt_entries = [e for s in steps for e in s if e.seq == 1]
    assert [e.token for e in prompt_entries] == new.prompt
    assert [e.pos for e in prompt_entries] == list(range(10))
    assert [e.logits for e in prompt_entries] == [False] * 9 + [True]
    assert new.sampled == [42]  # sampled from the step that fed its last prompt token


def generating(seq: int, prompt: list[int], sampled: list[int], limit: int = 50) -> Slot:
    slot = Slot(seq, prompt, limit=limit)
    slot.fed, slot.sampled = len(prompt), sampled
    return slot


def test_oldest_prompt_first_and_the_chunk_is_shared_while_others_generate() -> None:
    running = generating(2, [9], [5])
    first, second = Slot(3, [1] * 4, limit=1), Slot(1, [2] * 4, limit=1)
    entries, sampling = plan_step([running, first, second], prefill_chunk=4, n_batch=64)
    assert (first.fed, second.fed) == (3, 1)  # the older request first, the rest of the chunk to the next
    assert [e.seq for e in entries] == [1, 2, 3, 3, 3]  # by sequence id
    assert sampling == [running]


def test_with_nobody_generating_a_step_reads_whole_prompts_up_to_n_batch() -> None:
    a, b, c = Slot(0, [1] * 300, limit=5), Slot(1, [2] * 150, limit=5), Slot(2, [3] * 100, limit=5)
    entries, sampling = plan_step([a, b, c], prefill_chunk=16, n_batch=512)
    assert (a.fed, b.fed, c.fed) == (299, 149, 64)  # each last prompt token waits for a step of its own
    assert len(entries) == 512 and sampling == []
    entries, sampling = plan_step([a, b, c], prefill_chunk=16, n_batch=512)
    assert (a.fed, b.fed, c.fed) == (300, 150, 99) and sampling == [a, b]
    assert [e.pos for e in entries if e.seq < 2] == [299, 149]
    a.accept(7)
    b.accept(8)
    entries, sampling = plan_step([a, b, c], prefill_chunk=16, n_batch=512)
    assert c.fed == 100 and len(entries) == 3 and sampling == [a, b, c]  # c's last token alone, a and b


def test_entries_are_ordered_by_sequence_id_whatever_the_arrival() -> None:
    slots = [generating(seq, [seq], [100 + seq]) for seq in (5, 0, 7, 2)]
    new = Slot(1, [40, 41, 42], limit=3)
    entries, sampling = plan_step([*slots, new], prefill_chunk=8, n_batch=64)
    assert [e.seq for e in entries] == [0, 1, 1, 2, 5, 7]
    assert [s.seq for s in sampling] == [0, 2, 5, 7]
    assert [e.logits for e in entries] == [True, False, False, True, True, True]
    entries, sampling = plan_step([*slots, new], prefill_chunk=8, n_batch=64)
    assert [e.seq for e in entries] == [0, 1, 2, 5, 7] and entries[1] == BatchEntry(42, 2, 1, True)


def test_a_slot_starts_after_its_cached_prefix_and_always_reads_the_last_prompt_token() -> None:
    slot = Slot(0, [1, 2, 3, 4, 5], limit=2, fed=4)
    entries, sampling = plan_step([slot], prefill_chunk=8, n_batch=64)
    assert entries == [BatchEntry(5, 4, 0, True)] and sampling == [slot]
    with pytest.raises(ValueError, match="last prompt token"):
        Slot(0, [1, 2, 3], limit=2, fed=3)
    with pytest.raises(ValueError):
        Slot(0, [1, 2, 3], limit=2, fed=-1)


def test_cells_are_the_prompt_read_and_every_token_but_the_last_sampled() -> None:
    slot = Slot(0, [1, 2, 3, 4], limit=3)
    assert slot.cells() == []
    plan_step([slot], prefill_chunk=2, n_batch=2)
    assert slot.cells() == [1, 2]  # cut while prefilling (a cancel): what was read
    plan_step([slot], prefill_chunk=2, n_batch=2)
    assert slot.cells() == [1, 2, 3]
    plan_step([slot], prefill_chunk=2, n_batch=2)
    slot.accept(7)
    assert slot.cells() == [1, 2, 3, 4]  # 7 is not decoded yet
    plan_step([slot], prefill_chunk=2, n_batch=2)
    slot.accept(8)
    assert slot.cells() == [1, 2, 3, 4, 7]


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
        # each prompt reads up to its last token, then that token in a step of its own
        to_read = sum(len(s.prompt) - 1 - s.fed or 1 for s in active if s.prefilling)
        entries, sampling = plan_step(active, prefill_chunk=chunk, n_batch=n_batch)
        assert len(entries) <= n_batch
        prompt_tokens = sum(1 for e in entries if e.pos < len(pending[e.seq].prompt))
        assert prompt_tokens <= (chunk if generating_before else n_batch)
        if not generating_before:  # nobody waits for this step: it reads all it may
            assert prompt_tokens == min(n_batch, to_read)
        assert [e.seq for e in entries] == sorted(e.seq for e in entries)
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


@settings(max_examples=300, deadline=None)
@given(a=st.lists(st.integers(0, 3), max_size=40), b=st.lists(st.integers(0, 3), max_size=40))
def test_common_prefix_is_the_naive_count(a: list[int], b: list[int]) -> None:
    naive = 0
    while naive < min(len(a), len(b)) and a[naive] == b[naive]:
        naive += 1
    assert common_prefix(a, b) == common_prefix(tuple(a), b) == naive


def test_without_the_cache_the_lowest_free_id_and_nothing_reused() -> None:
    pool = SequencePool(4, prefix_cache=False)
    assert [pool.take([1, 2, 3]) for _ in range(3)] == [(0, 0), (1, 0), (2, 0)]
    pool.release(1, [1, 2, 3, 4])
    pool.release(0, [1, 2])
    assert pool.cached(1) == ()  # nothing is remembered
    assert pool.take([1, 2, 3]) == (0, 0)
    assert pool.free == 2


def test_the_free_sequence_with_the_longest_prefix_is_taken() -> None:
    pool = SequencePool(3)
    for _ in range(3):
        pool.take([9])
    pool.release(0, [1, 2, 3])
    pool.release(1, [1, 2, 3, 4, 5, 6])
    pool.release(2, [7, 8])
    assert pool.take([1, 2, 3, 4, 5, 6, 10, 11]) == (1, 6)  # the next turn: everything before it reused
    assert pool.cached(1) == ()  # in use
    assert pool.take([7, 8, 1]) == (2, 2)
    assert pool.take([1, 2, 3, 0]) == (0, 3)


def test_a_full_match_still_reads_the_last_prompt_token() -> None:
    pool = SequencePool(1)
    pool.take([5])
    pool.release(0, [1, 2, 3, 4, 5])
    assert pool.take([1, 2, 3]) == (0, 2)  # all cached: the last is read again for its logits


def test_a_prompt_that_diverges_at_its_first_token_reuses_nothing() -> None:
    pool = SequencePool(2)
    pool.take([1])
    pool.take([1])
    pool.release(0, [1, 2, 3])
    pool.release(1, [4, 5, 6])
    seq, reused = pool.take([2, 2, 3])
    assert reused == 0 and seq == 0  # no match anywhere: the least recently used one


def test_a_shared_head_does_not_evict_another_chat_while_an_empty_sequence_is_free() -> None:
    """A long conversation shares only the system prompt with a new chat: the new chat takes an empty
    sequence, and the conversation's next turn still finds all of its cells."""
    system = [1, 2, 3, 4]
    conversation = [*system, *range(100, 140)]
    pool = SequencePool(3)
    pool.take(conversation)
    pool.release(0, conversation)
    assert pool.take([*system, 50, 51]) == (1, 0)
    assert pool.take([*conversation, 7]) == (0, len(conversation))


def test_a_sequence_is_taken_when_it_saves_more_than_it_throws_away() -> None:
    system = [1, 2, 3, 4]
    pool = SequencePool(2)
    pool.take([9])
    pool.release(0, [*system, 50, 51, 52])  # 7 cells: 4 saved, 3 thrown away
    assert pool.take([*system, 60, 61]) == (0, 4)
    pool.release(0, [*system, 60, 61, *range(200, 300)])  # a long reply: 4 saved, 102 thrown away
    assert pool.take([*system, 70]) == (1, 0)
    pool.release(1, [*system, 70])
    # nothing empty: the sequence that loses the least
    assert pool.take([*system, 80]) == (1, 4)


def test_eviction_when_every_sequence_holds_a_conversation() -> None:
    pool = SequencePool(2)
    pool.take([1])
    pool.take([1])
    pool.release(1, [10, 11, 12])
    pool.release(0, [20, 21, 22])
    assert pool.take([30, 31]) == (1, 0)  # least recently given back
    assert pool.cached(0) == (20, 21, 22)
    assert pool.take([20, 21, 22, 23]) == (0, 3)


def test_pool_misuse() -> None:
    pool = SequencePool(1)
    with pytest.raises(ValueError):
        SequencePool(0)
    with pytest.raises(ValueError):
        pool.take([])
    with pytest.raises(RuntimeError):
        pool.release(0, [])  # never taken
    pool.take([1])
    with pytest.raises(RuntimeError):
        pool.take([1])  # none free


def test_copy_source_is_the_sequence_holding_the_most_of_the_prompt_running_or_free() -> None:
    system = list(range(100, 100 + MIN_COPY + 4))
    pool = SequencePool(4)
    for _ in range(3):
        pool.take([9])
    pool.release(1, [*system[:-2], 7])  # free, holds all but the system prompt's last two tokens
    prompt = [*system, 50, 51]
    seq, reused = pool.take(prompt)
    assert (seq, reused) == (1, len(system) - 2)  # the best free one: not worth a copy over it
    assert pool.copy_source(prompt, seq, reused, {0: [*system, 60, 61, 62]}) is None
    seq, reused = pool.take(prompt)
    assert reused == 0
    # a running sequence holds the whole system prompt: copied, past the most a free one holds
    busy = {0: [*system, 60, 61, 62], 2: system[:3]}
    assert pool.copy_source(prompt, seq, reused, busy) == (0, len(system))


def test_copy_source_needs_min_copy_more_and_never_copies_the_whole_prompt() -> None:
    pool = SequencePool(3)
    seq, reused = pool.take([1])
    prompt = list(range(MIN_COPY + 1))
    assert pool.copy_source(prompt, seq, reused, {5: prompt[: MIN_COPY - 1]}) is None  # a gain under MIN_COPY
    assert pool.copy_source(prompt, seq, reused, {5: prompt[:MIN_COPY]}) == (5, MIN_COPY)
    # the other holds the whole prompt and more: all but the last token, which is read for its logits
    assert pool.copy_source(prompt, seq, reused, {5: [*prompt, 3, 4]}) == (5, len(prompt) - 1)
    assert pool.copy_source(prompt, seq, reused, {seq: [*prompt, 3]}) is None  # itself is no source
    off = SequencePool(2, prefix_cache=False)
    seq, reused = off.take(prompt)
    assert off.copy_source(prompt, seq, reused, {1: [*prompt, 3]}) is None
