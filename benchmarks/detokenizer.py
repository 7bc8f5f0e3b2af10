"""Per-token cost of incremental detokenizers, side by side in one run.

Compares, on the multilingual corpus repeated to 256, 2k, 8k and 32k tokens, for SmolLM2 (byte-level BPE) and
Mistral v3 (SentencePiece with byte fallback), in single-token and 8-token steps:

* tokenrelay's ``Detokenizer`` (byte table + incremental UTF-8),
* HF ``tokenizers.decoders.DecodeStream``,
* a prefix/read-offset window (the vLLM/TGI approach, written here from its description),
* naive full-prefix decode (only up to 2k tokens: it is quadratic),
* transformers ``TextIteratorStreamer``.

For Mistral v3 the HF baselines run on an HF twin of the SentencePiece vocabulary with the Llama decoder chain
(``tests/tiny_tokenizers.py``); tokenrelay runs on the ``.model`` itself. Every method's output is checked
against the reference decode and marked when it differs. Prints µs/token and ratios. Not a test.

    python benchmarks/detokenizer.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tokenizers import Tokenizer as HFCore
from tokenizers.decoders import DecodeStream

from tiny_tokenizers import corpus_text, hf_llama_style
from tokenrelay import Detokenizer, load_tokenizer
from tokenrelay.tokenizers import mistral_data_path

Steps = list[list[int]]
Runner = Callable[[Steps], str]


def chunk(ids: Sequence[int], size: int) -> Steps:
    return [list(ids[i : i + size]) for i in range(0, len(ids), size)]


def run_tokenrelay(tok: object) -> Runner:
    def run(steps: Steps) -> str:
        detok = Detokenizer(tok)  # type: ignore[arg-type]
        feed = detok.feed
        singles = all(len(s) == 1 for s in steps)
        out = (
            [feed(s[0]) for s in steps] if singles else [feed(s) for s in steps]
        )  # an int per step, or a list
        return "".join(out) + detok.finish()

    return run


def run_decode_stream(tk: HFCore, *, per_id: bool = True) -> Runner:
    """HF DecodeStream, fed one id per call (``per_id``) or each step's ids as one list."""

    def run(steps: Steps) -> str:
        stream = DecodeStream(skip_special_tokens=True)
        step = stream.step
        out: list[str] = []
        for s in steps:
            for arg in s if per_id or len(s) == 1 else [s]:
                piece = step(tk, arg)
                if piece is not None:
                    out.append(piece)
        return "".join(out)

    return run


def run_prefix_offset(tk: HFCore) -> Runner:
    # vLLM/TGI: keep prefix_offset/read_offset into the id list, decode ids[prefix:] and ids[prefix:read],
    # emit the difference unless it ends in U+FFFD (an unfinished character).
    def run(steps: Steps) -> str:
        ids: list[int] = []
        prefix = read = 0
        out: list[str] = []
        decode = tk.decode
        for s in steps:
            ids.extend(s)
            prefix_text = decode(ids[prefix:read])
            new_text = decode(ids[prefix:])
            if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
                out.append(new_text[len(prefix_text) :])
                prefix, read = read, len(ids)
        tail = decode(ids[prefix:])[len(decode(ids[prefix:read])) :]
        return "".join(out) + tail

    return run


def run_naive(tk: HFCore) -> Runner:
    def run(steps: Steps) -> str:
        ids: list[int] = []
        sent = ""
        out: list[str] = []
        for s in steps:
            ids.extend(s)
            text = tk.decode(ids)
            if not text.endswith("\ufffd"):
                out.append(text[len(sent) :])
                sent = text
        text = tk.decode(ids)
        return "".join(out) + text[len(sent) :]

    return run


def run_text_streamer(tk: HFCore) -> Runner:
    import numpy as np
    from transformers import PreTrainedTokenizerFast, TextIteratorStreamer

    fast = PreTrainedTokenizerFast(tokenizer_object=tk)

    def run(steps: Steps) -> str:
        streamer = TextIteratorStreamer(fast, skip_special_tokens=True)  # type: ignore[arg-type]
        queue = streamer.text_queue
        out: list[str] = []
        for s in steps:
            streamer.put(np.asarray(s))
            while not queue.empty():
                out.append(queue.get_nowait())
        streamer.end()
        while not queue.empty():
            item = queue.get_nowait()
            if item is not streamer.stop_signal:
                out.append(item)
        return "".join(out)

    return run


def time_per_token(run: Runner, steps: Steps, n_tokens: int, repeats: int) -> tuple[float, str]:
    best = float("inf")
    text = ""
    # As timeit does: no collection in the middle of a run (it would charge one method for all the garbage).
    # Collect once before the repeats, not before each: a full collection walks every object and leaves the
    # caches cold, which dominates a 256-token run.
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            text = run(steps)
            best = min(best, time.perf_counter() - t0)
    finally:
        gc.enable()
    return best / n_tokens * 1e6, text


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="sizes 256 and 2k only")
    parser.add_argument("--sizes", help="comma-separated token counts (default 256,2048,8192,32768)")
    parser.add_argument("--repeats", type=int, default=5, help="best of N runs per cell")
    args = parser.parse_args()
    sizes = [256, 2048] if args.quick else [256, 2048, 8192, 32768]
    if args.sizes:
        sizes = [int(x) for x in args.sizes.split(",")]
    repeats = args.repeats
    text = corpus_text()
    smollm2 = load_tokenizer("smollm2")
    mistral = load_tokenizer("mistral-v3")
    hf_mistral = hf_llama_style(mistral_data_path("mistral_instruct_tokenizer_240323.model.v3"))
    setups = [
        ("SmolLM2", smollm2, smollm2.hf_tokenizer),  # type: ignore[attr-defined]
        ("Mistral v3", mistral, hf_mistral),
    ]
    print(
        f"{'tokenizer':<11} {'tokens':>6} {'step':>4}  {'method':<24} {'µs/token':>9} {'vs tokenrelay':>13}  exact"
    )
    for label, tok, tk in setups:
        base_ids = tok.encode(text)
        methods: list[tuple[str, Runner, int]] = [
            ("tokenrelay", run_tokenrelay(tok), 10**9),
            ("HF DecodeStream", run_decode_stream(tk), 10**9),
            ("HF DecodeStream (lists)", run_decode_stream(tk, per_id=False), 10**9),
            ("prefix/read offsets", run_prefix_offset(tk), 10**9),
            ("naive full decode", run_naive(tk), 2048),
            ("TextIteratorStreamer", run_text_streamer(tk), 10**9),
        ]
        flat: dict[int, float] = {}
        for step_size in (1, 8):
            for n in sizes:
                ids = (base_ids * (n // len(base_ids) + 1))[:n]
                want = tok.decode(ids)
                steps = chunk(ids, step_size)
                mine = 0.0
                for name, run, limit in methods:
                    if n > limit:
                        continue
                    us, got = time_per_token(run, steps, n, repeats)
                    if name == "tokenrelay":
                        mine = us
                        if step_size == 1:
                            flat[n] = us
                        ratio = "1.00×"
                    else:
                        ratio = f"{us / mine:.2f}×"
                    ok = "yes" if got == want else "NO"
                    print(f"{label:<11} {n:>6} {step_size:>4}  {name:<24} {us:>9.3f} {ratio:>13}  {ok}")
        lo, hi = min(flat.values()), max(flat.values())
        print(
            f"{label}: tokenrelay single-step cost from {sizes[0]} to {sizes[-1]} tokens: "
            f"{lo:.3f}–{hi:.3f} µs/token (spread {100 * (hi - lo) / lo:.0f} %)\n"
        )


if __name__ == "__main__":
    main()
