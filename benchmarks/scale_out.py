"""Scale-out: tokenrelay in front of an engine server vs that server alone, same model, 1 / 4 / 8 streams.

``--backend vllm`` (the default; ``make bench-vllm``, in the vLLM venv): three servers over the same
SmolLM2-135M-Instruct HF copy (bf16, eager), measured in interleaved rounds:

- ``vllm``: vLLM's own OpenAI server (``python -m vllm.entrypoints.openai.api_server``), the baseline;
- ``upstream``: ``tokenrelay serve --engine upstream --upstream <that server>`` (ids relayed and detokenized);
- ``in-process``: ``tokenrelay serve --engine vllm`` (vLLM's AsyncLLM inside tokenrelay).

``--backend llama-server`` (``make bench-upstream``, the main venv): llama.cpp's own ``llama-server`` (built by
``make llama-server``) over the embedded SmolLM2 GGUF, the baseline, and ``upstream``: ``tokenrelay serve
--engine upstream --upstream-protocol llamacpp`` in front of it (its text deltas relayed).

For each, N concurrent streamed chat requests (distinct prompts, temperature 0): aggregate completion
tokens/s over the wall time of the batch, and TTFT (request sent → first content byte) per stream. Every
stream's text must equal the baseline's own non-streamed reply to the same request. Prints medians over the
rounds, side by side, with ratios to the baseline and the TTFT overhead in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "Write a haiku about tea.",
    "Name three rivers in Europe.",
    "How do plants make food?",
    "Give me a tip for learning Python.",
    "What is the capital of Japan?",
    "Describe a cat in one sentence.",
    "Why is the sky blue?",
    "Suggest a name for a llama.",
]
VLLM_FLAGS = ["--enforce-eager", "--max-model-len", "1024"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its children so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def start(command: list[str], port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("wb") as out:
        # Its own process group, so it can be paused with its children (vLLM's engine core) while others run.
        proc = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + 600
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    return proc
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{command[:4]} did not start; see {log}")
            time.sleep(1)
    except BaseException:  # not started, or interrupted while starting: leave nothing running
        proc.terminate()
        proc.wait(30)
        raise


def pause(pids: dict[str, int], keep: set[str] | None) -> None:
    """Stop the process group of every server not in ``keep`` and resume the others (``keep=None``: all)."""
    for name, pid in pids.items():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT if keep is None or name in keep else signal.SIGSTOP)
    time.sleep(0.2)  # let a resumed server settle (its timers fire late once) before the batch starts


async def one_stream(
    client: httpx.AsyncClient, url: str, model: str, question: str, max_tokens: int
) -> tuple[float, int, str]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    ttft = None
    text, tokens = [], 0
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices") or ():
                piece = choice["delta"].get("content")
                if piece:
                    if ttft is None:
                        ttft = time.perf_counter() - sent
                    text.append(piece)
    return ttft or 0.0, tokens, "".join(text)


async def batch(url: str, model: str, streams: int, max_tokens: int) -> tuple[float, float, list[str], int]:
    """(aggregate tokens/s, TTFT p50, texts, tokens) for ``streams`` concurrent requests."""
    async with httpx.AsyncClient(timeout=300) as client:
        started = time.perf_counter()
        results = await asyncio.gather(
            *(one_stream(client, url, model, QUESTIONS[i], max_tokens) for i in range(streams))
        )
        wall = time.perf_counter() - started
    tokens = sum(r[1] for r in results)
    return tokens / wall, statistics.median(r[0] for r in results), [r[2] for r in results], tokens


def references(url: str, model: str, max_tokens: int) -> list[str]:
    out = []
    for question in QUESTIONS:
        body = {"model": model, "messages": [{"role": "user", "content": question}], "temperature": 0}
        body["max_tokens"] = max_tokens
        reply = httpx.post(url + "/v1/chat/completions", json=body, timeout=300).json()
        out.append(reply["choices"][0]["message"]["content"])
    return out


DEFAULT_LLAMA_SERVER = Path.home() / ".cache" / "tokenrelay" / "llama-server" / "llama-server"


def vllm_servers(ports: dict[str, int], dtype: str) -> dict[str, tuple[list[str], str]]:
    """name → (command, model to ask for); the first is the baseline."""
    from tokenrelay.engines.vllm import smollm2_hf_dir

    model_dir = smollm2_hf_dir(print)
    py = sys.executable
    flags = [*VLLM_FLAGS, "--dtype", dtype]
    vllm_cmd = [py, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    vllm_cmd += ["--served-model-name", "smol", "--port", str(ports["vllm"]), *flags]
    vllm_url = f"http://127.0.0.1:{ports['vllm']}"
    up_cmd = [py, "-m", "tokenrelay", "serve", "--engine", "upstream", "--upstream", vllm_url]
    up_cmd += ["--model", "smol", "--tokenizer", str(model_dir), "--port", str(ports["upstream"])]
    in_cmd = [py, "-m", "tokenrelay", "serve", "--engine", "vllm", "--model", "smollm2", *flags]
    in_cmd += ["--port", str(ports["in-process"])]
    quiet = ["--log-level", "warning"]
    return {
        "vllm": (vllm_cmd, "smol"),
        "upstream": ([*up_cmd, *quiet], "smol"),
        "in-process": ([*in_cmd, *quiet], "SmolLM2-135M-Instruct"),
    }


def llama_servers(
    ports: dict[str, int], binary: Path, parallel: int, threads: int
) -> dict[str, tuple[list[str], str]]:
    """llama-server (the baseline) and tokenrelay in front of it, relaying its text deltas."""
    from tokenrelay.engines.llamacpp import resolve_model_path

    if not binary.is_file():
        raise SystemExit(f"no llama-server at {binary}: run `make llama-server` (about 7 minutes on 2 cores)")
    gguf = resolve_model_path("smollm2")
    ls_cmd = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(ports["llama-server"])]
    ls_cmd += ["--parallel", str(parallel), "-c", str(2048 * parallel)]
    ls_cmd += ["-t", str(threads), "-tb", str(threads), "--no-webui"]
    up_cmd = [sys.executable, "-m", "tokenrelay", "serve", "--engine", "upstream", "--upstream-protocol"]
    up_cmd += ["llamacpp", "--upstream", f"http://127.0.0.1:{ports['llama-server']}", "--model", "smol"]
    up_cmd += ["--tokenizer", str(gguf), "--port", str(ports["upstream"]), "--log-level", "warning"]
    return {"llama-server": (ls_cmd, "smol"), "upstream": (up_cmd, "smol")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("vllm", "llama-server"), default="vllm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--dtype", default="bfloat16", help="vLLM's dtype (float32 is faster on CPUs without AVX-512 BF16)"
    )
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--levels", default="1,4,8")
    parser.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER, help="its binary")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="llama-server's threads")
    args = parser.parse_args()
    levels = [int(n) for n in args.levels.split(",")]
    sys.path.insert(0, str(ROOT / "src"))
    logs = Path(os.environ.get("TMPDIR", "/tmp"))
    if args.backend == "vllm":
        ports = {name: free_port() for name in ("vllm", "upstream", "in-process")}
        plan = vllm_servers(ports, args.dtype)
    else:
        ports = {name: free_port() for name in ("llama-server", "upstream")}
        plan = llama_servers(ports, args.llama_server, max(levels), args.threads)
    baseline = next(iter(plan))
    procs = []
    try:
        for name, (command, _) in plan.items():
            print(f"starting {name}…", flush=True)
            procs.append(start(command, ports[name], logs / f"scale_out-{name}.log"))
        models = {name: model for name, (_, model) in plan.items()}
        urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}

        expected = references(urls[baseline], models[baseline], args.max_tokens)
        for name in ports:  # warm-up, and the exactness check at one stream
            asyncio.run(batch(urls[name], models[name], 1, 8))
        samples: dict[tuple[str, int], list[tuple[float, float]]] = {}
        mismatches = 0
        # CPU of each server's own process during its own batches: vLLM's engine core is a child process that
        # is still running, so it is not counted; what is left is each front end's cost per token (llama-server
        # is one process: its number is the engine's whole cost).
        pids = {name: proc.pid for name, proc in zip(ports, procs, strict=True)}
        cpu = dict.fromkeys(ports, 0.0)
        counted = dict.fromkeys(ports, 0)
        # On a small machine an idle server must not take CPU from the one measured (an engine core or its
        # OpenMP threads may poll), so the servers a batch does not use are paused (SIGSTOP on their process group) while it runs: the
        # upstream front runs with its backend, each other server alone.
        needs = {name: {name, baseline} if name == "upstream" else {name} for name in ports}
        for _ in range(args.rounds):
            for n in levels:
                for name in ports:  # interleaved, so machine noise hits them all alike
                    pause(pids, keep=needs[name])
                    before = cpu_seconds(pids[name])
                    rate, ttft, texts, tokens = asyncio.run(
                        batch(urls[name], models[name], n, args.max_tokens)
                    )
                    cpu[name] += cpu_seconds(pids[name]) - before
                    counted[name] += tokens
                    mismatches += sum(t != e for t, e in zip(texts, expected, strict=False))
                    samples.setdefault((name, n), []).append((rate, ttft))

        print(f"\nmax_tokens {args.max_tokens}, temperature 0, medians of {args.rounds} rounds")
        print(
            f"{'streams':>7} | {'server':<12} | {'tok/s':>7} | {'ratio':>5} | {'TTFT p50':>9} | {'overhead':>8}"
        )
        for n in levels:
            base_rate = statistics.median(s[0] for s in samples[baseline, n])
            base_ttft = statistics.median(s[1] for s in samples[baseline, n])
            for name in ports:
                rate = statistics.median(s[0] for s in samples[name, n])
                ttft = statistics.median(s[1] for s in samples[name, n])
                print(
                    f"{n:>7} | {name:<12} | {rate:7.1f} | {rate / base_rate:5.2f} | {ttft * 1000:7.1f}ms"
                    f" | {(ttft - base_ttft) * 1000:+6.1f}ms"
                )
        print(
            "\nCPU per token of each server's own process (vLLM's engine core excluded; llama-server: all of it):"
        )
        for name in ports:
            print(f"  {name:<12} {cpu[name] / max(counted[name], 1) * 1e6:6.0f} µs ({counted[name]} tokens)")
        total = args.rounds * sum(levels) * len(ports)
        print(f"\nexact: {total - mismatches}/{total} streams equal {baseline}'s own non-streamed reply")
        if mismatches:
            raise SystemExit(1)
    finally:
        pause({str(proc.pid): proc.pid for proc in procs}, keep=None)  # resumed, so SIGTERM is handled
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
