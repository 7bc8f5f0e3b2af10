"""LlamaCppEngine on the real SmolLM2-135M-Instruct GGUF (about 100 MB, fast on a CPU)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import cast

import pytest

pytest.importorskip("llama_cpp")

from llama_cpp import ChatCompletionRequestMessage, Llama

from _steps import closable, generate
from _steps import ids as step_ids
from tokenrelay._errors import ConfigError, InvalidRequestError
from tokenrelay._stream import Finished, TextDelta
from tokenrelay.engines.base import ChatMessage, Engine, Prompt, SamplingParams, stream_events
from tokenrelay.engines.llamacpp import LlamaCppEngine, resolve_model_path

GREEDY = SamplingParams(max_tokens=24, temperature=0.0)
CHAT: list[ChatMessage] = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaCppEngine]:
    eng = LlamaCppEngine.load(n_ctx=512, n_parallel=4)
    yield eng
    asyncio.run(eng.aclose())


@pytest.fixture(scope="module")
def oracle() -> Iterator[Llama]:
    """llama-cpp-python's own high-level model on the same GGUF: the reference the engine is checked against."""
    llama = Llama(model_path=str(resolve_model_path("smollm2")), n_ctx=512, flash_attn=True, verbose=False)
    yield llama
    llama.close()


async def ids_of(engine: LlamaCppEngine, prompt: Prompt, params: SamplingParams) -> list[int]:
    return [i async for step in generate(engine, prompt, params) for i in step_ids(step)]


async def test_greedy_chat_matches_llama_cpp_pythons_own_completion(
    engine: LlamaCppEngine, oracle: Llama
) -> None:
    assert isinstance(engine, Engine)
    events = [e async for e in stream_events(engine, CHAT, GREEDY)]
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    final = events[-1]
    assert isinstance(final, Finished)
    # Oracle: llama-cpp-python's own chat completion (its template handling, its sampler, its detokenizer).
    reference = oracle.create_chat_completion(
        messages=[cast(ChatCompletionRequestMessage, dict(m)) for m in CHAT],
        temperature=0.0,
        max_tokens=GREEDY.max_tokens,
        top_k=0,
        min_p=0.0,
        repeat_penalty=1.0,
    )
    assert isinstance(reference, dict)  # not a stream
    choice = reference["choices"][0]
    assert text == choice["message"]["content"]
    assert final.reason == choice["finish_reason"]
    assert final.usage.prompt_tokens == reference["usage"]["prompt_tokens"]
    # The EOS id counts as a completion token for us (it was computed); llama-cpp-python leaves it out.
    assert final.usage.completion_tokens in {
        reference["usage"]["completion_tokens"],
        reference["usage"]["completion_tokens"] + 1,
    }


async def test_greedy_is_deterministic_and_text_matches_llama_detokenize(
    engine: LlamaCppEngine, oracle: Llama
) -> None:
    prompt = "The three primary colours are"
    first = await ids_of(engine, prompt, GREEDY)
    assert first == await ids_of(engine, prompt, GREEDY)
    events = [e async for e in stream_events(engine, prompt, GREEDY)]
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == bytes(oracle.detokenize(first)).decode("utf-8", errors="replace")
    assert len(first) == GREEDY.max_tokens  # a raw prompt runs to max_tokens here (no EOS)


async def test_seed_makes_sampling_repeatable(engine: LlamaCppEngine) -> None:
    def params(seed: int) -> SamplingParams:
        return SamplingParams(max_tokens=16, temperature=1.0, top_p=0.95, seed=seed)

    base = await ids_of(engine, CHAT, params(7))
    assert base == await ids_of(engine, CHAT, params(7))
    others = [await ids_of(engine, CHAT, params(seed)) for seed in (8, 9, 10)]
    assert any(other != base for other in others)


def test_chat_template_from_the_gguf_is_applied(engine: LlamaCppEngine) -> None:
    rendered = engine.render(CHAT)
    assert engine.metadata["tokenizer.chat_template"]
    assert "<|im_start|>user\nWhat is 2+2?<|im_end|>\n" in rendered
    assert rendered.endswith("<|im_start|>assistant\n")
    # llama.cpp's tokenization of the rendered prompt decodes back to it with our tokenizer (specials kept).
    ids = engine.prompt_ids(CHAT)
    assert engine.tokenizer.decode(ids, skip_special_tokens=False) == rendered
    assert engine.render("raw text") == "raw text"


async def test_eos_ends_the_generation(engine: LlamaCppEngine) -> None:
    prompt: list[ChatMessage] = [{"role": "user", "content": "Reply with one word: yes or no?"}]
    ids = await ids_of(engine, prompt, SamplingParams(max_tokens=100, temperature=0.0))
    assert ids[-1] in engine.stop_token_ids
    assert all(i not in engine.stop_token_ids for i in ids[:-1])
    assert len(ids) < 100


async def test_cancel_after_n_steps_stops_within_one_step(engine: LlamaCppEngine) -> None:
    n = 5
    reached = asyncio.Event()

    async def consume() -> None:
        seen = 0
        async for _ in generate(engine, "Count from one to one hundred:", SamplingParams(max_tokens=400)):
            seen += 1
            if seen == n:
                reached.set()

    await engine.wait_idle()
    before = engine.steps_computed
    task = asyncio.create_task(consume())
    await reached.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await engine.wait_idle()
    # Each step computed one token; at most the one in flight at the cancel follows the n consumed, and the
    # prompt may take one step more (the rest of it, before its last token is read alone: issue 33).
    assert n <= engine.steps_computed - before <= n + 2
    await asyncio.sleep(0.2)
    assert engine.steps_computed - before <= n + 2


async def test_closing_the_iterator_stops_it_and_the_engine_stays_usable(engine: LlamaCppEngine) -> None:
    expected = await ids_of(engine, CHAT, GREEDY)
    await engine.wait_idle()
    before = engine.steps_computed
    async with contextlib.aclosing(closable(generate(engine, CHAT, SamplingParams(max_tokens=300)))) as steps:
        async for _ in steps:
            break
    await engine.wait_idle()
    assert engine.steps_computed - before <= 2
    assert await ids_of(engine, CHAT, GREEDY) == expected


async def test_concurrent_generations_queue_instead_of_mixing(engine: LlamaCppEngine) -> None:
    prompts: list[Prompt] = ["Once upon a time", CHAT, "def fibonacci(n):"]
    sequential = [await ids_of(engine, p, GREEDY) for p in prompts]
    concurrent = await asyncio.gather(*(ids_of(engine, p, GREEDY) for p in prompts))
    assert list(concurrent) == sequential


async def test_prompt_longer_than_the_context_is_refused(engine: LlamaCppEngine) -> None:
    with pytest.raises(InvalidRequestError) as info:
        await ids_of(engine, "word " * 600, GREEDY)
    assert info.value.code == "context_length_exceeded"


async def test_the_engine_reads_the_ids_it_is_given_and_tokenizes_nothing(
    engine: LlamaCppEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One tokenization per request (issue 23): the ids the caller computed are what the model reads."""
    expected = await ids_of(engine, CHAT, GREEDY)
    given = engine.prompt_ids(CHAT)

    def no_second_tokenization(prompt: Prompt) -> list[int]:
        raise AssertionError("generate tokenized the prompt again")

    monkeypatch.setattr(engine, "prompt_ids", no_second_tokenization)
    # The text prompt says something else: only the ids count.
    steps = engine.generate("Once upon a time", GREEDY, prompt_ids=given)
    assert [i async for step in steps for i in step_ids(step)] == expected


async def test_ids_outside_the_vocabulary_are_refused(engine: LlamaCppEngine) -> None:
    params = SamplingParams(max_tokens=4, temperature=0.0)
    for bad in ([1, 2, engine.tokenizer.vocab_size + 5], [-1, 2]):
        with pytest.raises(InvalidRequestError, match="outside the vocabulary") as info:
            async for _ in engine.generate("x", params, prompt_ids=bad):
                pass
        assert info.value.param == "prompt"
    assert len(await ids_of(engine, CHAT, params)) == 4  # and the engine goes on serving


def test_model_paths(tmp_path: pytest.TempPathFactory) -> None:
    assert resolve_model_path("smollm2").name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    with pytest.raises(ConfigError, match="not found"):
        resolve_model_path("/nonexistent/model.gguf")
    with pytest.raises(ConfigError, match=r"\.gguf"):
        resolve_model_path("model.bin")


async def test_any_gguf_path_loads_with_progress() -> None:
    lines: list[str] = []
    path = str(resolve_model_path("smollm2"))
    engine = await asyncio.to_thread(LlamaCppEngine.load, path, n_ctx=256, on_progress=lines.append)
    try:
        assert lines[0].startswith("loading model SmolLM2-135M-Instruct.Q4_1.gguf (") and "MB)" in lines[0]
        assert lines[1].startswith("loaded SmolLM2-135M-Instruct.Q4_1.gguf in ")
        assert engine.model == "SmolLM2-135M-Instruct.Q4_1"
        assert len(await ids_of(engine, CHAT, SamplingParams(max_tokens=4, temperature=0.0))) <= 4
    finally:
        await engine.aclose()


# -- continuous batching (issue 10) ------------------------------------------------------------------------------

PROMPTS: list[Prompt] = [
    "Once upon a time",
    CHAT,
    "def fibonacci(n):",
    [{"role": "user", "content": "Name three colours."}],
    "The capital of France is",
    "1, 2, 3, 4,",
]


async def test_concurrent_generations_share_every_step(engine: LlamaCppEngine) -> None:
    """Four chats at once: every first token arrives before any reply ends, and steps carry all four."""
    params = SamplingParams(max_tokens=24, temperature=0.0)
    alone = [await ids_of(engine, p, params) for p in PROMPTS[:4]]
    await engine.wait_idle()
    before_steps = engine.steps_computed
    engine.max_batch_seen = 0
    first_at: list[float] = []
    done_at: list[float] = []
    loop = asyncio.get_running_loop()

    async def run(prompt: Prompt) -> list[int]:
        ids: list[int] = []
        async for step in generate(engine, prompt, params):
            if not ids:
                first_at.append(loop.time())
            ids.extend(step_ids(step))
        done_at.append(loop.time())
        return ids

    together = await asyncio.gather(*(run(p) for p in PROMPTS[:4]))
    assert max(first_at) < min(done_at)
    assert engine.max_batch_seen == 4
    # Shared steps: far fewer decodes than tokens (alone, each token would be one step).
    assert engine.steps_computed - before_steps < sum(len(ids) for ids in together) * 0.5
    # Greedy replies are the same batched as alone (llama.cpp's CPU kernels reduce each row on its own).
    assert list(together) == alone


async def test_a_reply_past_300_tokens_is_the_same_batched_as_alone_below_256_cells(
    engine: LlamaCppEngine,
) -> None:
    """Batched and alone agree token for token while a sequence holds fewer than 256 cells, and no further.

    llama.cpp pads a step's KV view to 256 cells (``llama_kv_cache::get_n_kv``). A lone sequence's decode step
    whose view reaches 512 cells takes the CPU flash-attention kernel's split-KV path (one query, one stream,
    ``nek1 >= 512`` in ``ggml_compute_forward_flash_attn_ext``: the cells cut between the threads, partial sums
    reduced after), where a batch's step takes the row-per-thread path: the sums differ in their last bits,
    and a greedy reply may take another token there (here the count diverges ~257 cells in). Below 256 cells
    both take the row path, and a batch's longer view is masked cells the kernel skips, so they are equal."""
    params = SamplingParams(max_tokens=360, temperature=0.0)
    prompts: list[Prompt] = [
        "Count from one to one hundred: one, two, three,",
        [{"role": "user", "content": "Write a long, detailed essay about the history of tea."}],
    ]
    alone = [await ids_of(engine, p, params) for p in prompts]
    assert min(len(a) for a in alone) > 300  # long enough to cross the 256-cell page
    together = await asyncio.gather(*(ids_of(engine, p, params) for p in [*prompts, "Once upon a time"]))
    for prompt, a, t in zip(prompts, alone, together[:2], strict=True):
        below = 256 - len(engine.prompt_ids(prompt))  # reply steps whose sequence holds < 256 cells
        assert t[:below] == a[:below]


async def test_requests_beyond_the_sequences_wait_and_then_run(engine: LlamaCppEngine) -> None:
    params = SamplingParams(max_tokens=8, temperature=0.0)
    alone = [await ids_of(engine, p, params) for p in PROMPTS]
    engine.max_batch_seen = 0
    together = await asyncio.gather(*(ids_of(engine, p, params) for p in PROMPTS))
    assert engine.max_batch_seen == engine.n_parallel == 4
    assert list(together) == alone


async def test_cancelling_one_request_frees_its_sequence_and_the_others_go_on(engine: LlamaCppEngine) -> None:
    params = SamplingParams(max_tokens=20, temperature=0.0)
    expected = [await ids_of(engine, p, params) for p in PROMPTS[:3]]
    got_three = asyncio.Event()

    async def leaver() -> None:
        seen = 0
        async for _ in generate(engine, "Count from one to one hundred:", SamplingParams(max_tokens=400)):
            seen += 1
            if seen == 3:
                got_three.set()

    task = asyncio.create_task(leaver())
    others = asyncio.gather(*(ids_of(engine, p, params) for p in PROMPTS[:3]))
    await got_three.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert list(await others) == expected
    await engine.wait_idle()
    # All four sequences are free again: four new requests run side by side.
    engine.max_batch_seen = 0
    await asyncio.gather(
        *(ids_of(engine, p, SamplingParams(max_tokens=3, temperature=0.0)) for p in PROMPTS[:4])
    )
    assert engine.max_batch_seen == 4


async def test_each_request_samples_with_its_own_settings(engine: LlamaCppEngine) -> None:
    seeded = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.95, seed=7)
    greedy = SamplingParams(max_tokens=16, temperature=0.0)
    alone_seeded = await ids_of(engine, CHAT, seeded)
    alone_greedy = await ids_of(engine, CHAT, greedy)
    mixed = await asyncio.gather(
        ids_of(engine, CHAT, seeded),
        ids_of(engine, CHAT, greedy),
        ids_of(engine, CHAT, SamplingParams(max_tokens=16, temperature=1.0, seed=8)),
    )
    assert mixed[0] == alone_seeded
    assert mixed[1] == alone_greedy
    assert mixed[2] != alone_seeded


async def test_a_full_sequence_ends_with_length_never_a_crash() -> None:
    engine = await asyncio.to_thread(LlamaCppEngine.load, n_ctx=64, n_parallel=2)
    try:
        assert engine.n_ctx >= 64  # llama.cpp rounds a sequence up to whole cache pages (256 cells)
        # A count the model keeps going with: it runs into the end of its sequence, not into an EOS.
        prompt = ", ".join(str(i) for i in range(1, 21)) + ","
        assert 0 < engine.n_ctx - len(engine.prompt_ids(prompt)) < 200
        events = [
            e async for e in stream_events(engine, prompt, SamplingParams(max_tokens=None, temperature=0.0))
        ]
        final = events[-1]
        assert isinstance(final, Finished)
        assert final.reason == "length"
        assert final.usage.prompt_tokens + final.usage.completion_tokens == engine.n_ctx
        with pytest.raises(InvalidRequestError) as info:
            await ids_of(engine, "word " * engine.n_ctx, GREEDY)
        assert info.value.code == "context_length_exceeded"
    finally:
        await engine.aclose()
