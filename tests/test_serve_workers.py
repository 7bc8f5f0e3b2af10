"""``tokenrelay serve --workers N``: real processes on one port, as a user runs them.

A killed worker comes back, SIGTERM drains every worker, the metrics and ``/health`` are the whole server's,
the least-loaded pick spans the workers, and N > 1 is refused for the engines that keep a model in-process.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from _uvicorn import serve
from server_helpers import ServerProcess, free_port, replay_app
from tokenrelay.cli import main

TEXT = "Workers ☕ share 🦙 one port: नमस्ते, 你好. " * 30
CHAT = {"model": "replay", "messages": [{"role": "user", "content": "go"}], "stream": True}


def health(url: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(url + "/health", timeout=5).json()
    return body


def wait_until(check: Any, what: str, server: ServerProcess, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        if server.proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen:\n{server.output()}")


@contextmanager
def workers_process(*args: str, workers: int = 2) -> Iterator[ServerProcess]:
    """``tokenrelay serve --workers N ARGS`` on a free port, once every worker serves."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenrelay", "serve", "--port", str(port), "--workers", str(workers), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    server = ServerProcess(f"http://127.0.0.1:{port}", proc)
    try:
        wait_until(
            lambda: health(server.url)["workers"]["running"] == workers, "every worker serving", server
        )
        yield server
    finally:
        if proc.poll() is None:
            proc.kill()  # the workers see their parent gone and leave by themselves
        proc.wait(timeout=10)
        server._reader.join(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(url + "/metrics", timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def served_by(server: ServerProcess) -> dict[int, int]:
    """Generations each worker logged (one line per reply, tagged with the worker)."""
    counts: dict[int, int] = {}
    for line in server.output().splitlines():
        if "/v1/chat/completions chatcmpl-" in line and "[worker " in line:
            worker = int(line.split("[worker ", 1)[1].split("]", 1)[0])
            counts[worker] = counts.get(worker, 0) + 1
    return counts


def open_stream(stack: ExitStack, url: str, max_tokens: int) -> Iterator[str]:
    """A streamed chat, read up to its first text; the rest of its lines are left to the caller."""
    response = stack.enter_context(
        httpx.stream(
            "POST", url + "/v1/chat/completions", json={**CHAT, "max_tokens": max_tokens}, timeout=30
        )
    )
    lines = response.iter_lines()
    while '"content"' not in next(lines):
        pass
    return lines


def test_a_killed_worker_comes_back_the_metrics_sum_and_sigterm_drains_all(tmp_path: Path) -> None:
    text = tmp_path / "reply.txt"
    text.write_text(TEXT)
    args = ("--engine", "replay", "--text-file", str(text), "--rate", "50", "--graceful-timeout", "1")
    with workers_process(*args) as server:
        url = server.url
        assert health(url)["workers"]["configured"] == 2
        requests = 0
        while len(served_by(server)) < 2 and requests < 60:  # until both workers have served (the kernel
            body = {**CHAT, "stream": False, "max_tokens": 3}  # picks which takes each connection)
            httpx.post(url + "/v1/chat/completions", json=body, timeout=30).raise_for_status()
            requests += 1
            time.sleep(0.05)
        assert len(served_by(server)) == 2, server.output()

        # One worker killed outright: the parent restarts it in its place; what it had counted stays counted.
        first = {w["worker"]: w["pid"] for w in health(url)["workers"]["each"]}
        os.kill(first[0], signal.SIGKILL)
        wait_until(
            lambda: (
                {w["worker"]: w["pid"] for w in health(url)["workers"]["each"]}.keys() == {0, 1}
                and health(url)["workers"]["each"][0]["pid"] != first[0]
            ),
            "worker 0 restarted",
            server,
        )
        assert f"worker 0 (pid {first[0]}) exited with status -9" in server.output()
        assert health(url)["workers"]["each"][1]["pid"] == first[1]  # the other one never stopped

        model = (("model", "replay"),)
        for _ in range(4):  # every scrape, whichever worker answers it, is the whole server's
            got = samples(url)
            route = (("endpoint", "/v1/chat/completions"), ("model", "replay"), ("stream", "false"))
            assert got["tokenrelay_requests_total", route] == requests
            assert got["tokenrelay_tokens_total", (("kind", "completion"), *model)] == 3 * requests
            chat = (("endpoint", "/v1/chat/completions"), *model)
            assert got["tokenrelay_e2e_seconds_count", chat] == requests
            assert got["tokenrelay_ttft_seconds_count", chat] == requests
            assert got["tokenrelay_inter_token_seconds_count", chat] == 2 * requests  # two gaps a reply
            assert got["tokenrelay_active_generations", model] == 0
            assert ("tokenrelay_errors_total", (*model, ("type", "server_error"))) in got
            assert any(name == "tokenrelay_build_info" for name, _ in got)
            assert not any("pid" in dict(labels) for _, labels in got)

        # SIGTERM: both workers drain by the one-process rule, every stream ends with an error and [DONE].
        with ExitStack() as stack:
            streams: list[Iterator[str]] = []
            while len(streams) < 12:
                streams.append(open_stream(stack, url, 4000))
                states = health(url)["workers"]["each"]
                if len(streams) >= 2 and all(w["active"] >= 1 for w in states):
                    break
            states = health(url)["workers"]["each"]
            assert all(w["active"] >= 1 for w in states), states
            assert health(url)["active"] == len(streams)
            server.proc.send_signal(signal.SIGTERM)
            for lines in streams:
                rest = list(lines)
                assert rest[-2:] == ["data: [DONE]", ""] or rest[-1] == "data: [DONE]", rest[-4:]
                errors = [json.loads(x[6:]) for x in rest if x.startswith("data: {") and '"error"' in x]
                assert errors and errors[-1]["error"]["code"] == "server_shutting_down"
            assert server.proc.wait(timeout=30) == 0
        log = server.output()
        for worker in (0, 1):
            assert f"[worker {worker}]: shutting down:" in log
        assert "shutting down: 2 workers draining" in log


def test_the_least_loaded_pick_spans_the_workers_and_the_replica_metrics_sum() -> None:
    with ExitStack() as stack:
        replicas = [stack.enter_context(serve(replay_app(TEXT, rate=20.0)[0])) for _ in range(2)]
        upstream = [a for url in replicas for a in ("--upstream", url)]
        server = stack.enter_context(
            workers_process(
                "--engine", "upstream", *upstream, "--tokenizer", "smollm2", "--health-interval", "0"
            )
        )
        url = server.url
        streams: list[Iterator[str]] = []
        with ExitStack() as open_streams:
            while len(streams) < 12:
                streams.append(open_stream(open_streams, url, 4000))
                loads = [httpx.get(r + "/health").json()["active"] for r in replicas]
                assert max(loads) - min(loads) <= 1, loads  # each new stream went to the idler replica
                states = health(url)["workers"]["each"]
                if len(streams) >= 4 and len(streams) % 2 == 0 and all(w["active"] for w in states):
                    break
            assert all(w["active"] for w in health(url)["workers"]["each"])  # both workers relay
            assert [r["active"] for r in health(url)["replicas"]] == loads
            got = samples(url)
            total = sum(got["tokenrelay_upstream_requests_total", (("replica", r),)] for r in replicas)
            assert total == len(streams)
            for r in replicas:
                assert got["tokenrelay_upstream_active", (("replica", r),)] == len(streams) / 2
                assert got["tokenrelay_upstream_up", (("replica", r),)] == 1
        # The clients left: every worker's upstream requests close, and the gauges come back to zero.
        wait_until(lambda: health(url)["active"] == 0, "the streams closed", server)
        got = samples(url)
        assert all(got["tokenrelay_upstream_active", (("replica", r),)] == 0 for r in replicas)
        assert sum(got["tokenrelay_upstream_cancelled_total", (("replica", r),)] for r in replicas) == len(
            streams
        )


@pytest.mark.parametrize("engine", ["llamacpp", "vllm"])
def test_several_workers_are_refused_for_an_engine_with_the_model_in_process(
    engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--engine", engine, "--workers", "2", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "copies" in err and "upstream, replay" in err


def test_zero_workers_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--engine", "replay", "--workers", "0", "--port", "0"]) == 2
    assert "--workers 0" in capsys.readouterr().err


# -- the multiprocess metrics against one process's ----------------------------------------------------------

_OBSERVE = """
import sys
from tokenrelay.server.generation import ENDPOINTS
from tokenrelay.server.metrics import ServerMetrics
part, parts = int(sys.argv[1]), int(sys.argv[2])
metrics = ServerMetrics("m", ENDPOINTS, multiprocess=parts > 1)
gaps = [0.0004 * i for i in range(300)]  # across every bucket of the inter-token histogram
for i, gap in enumerate(gaps):
    if i % parts == part:
        latency = metrics.latency["/v1/completions" if i % 3 else "/v1/messages"]
        latency.inter_token.observe_many([gap, gap / 2])
        latency.ttft.observe(gap * 10)
        metrics.completion_tokens.inc(3)
        metrics.requests_by_route["/v1/completions", True].inc()
if parts == 1 or part == parts:
    sys.stdout.write(metrics.render().decode())
"""


def _metrics_run(part: int, parts: int, env: dict[str, str]) -> str:
    src = str(Path(__file__).resolve().parents[1] / "src")
    run = subprocess.run(
        [sys.executable, "-c", _OBSERVE, str(part), str(parts)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": src, **env},
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def _parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_two_processes_metrics_equal_one_process_that_saw_everything(tmp_path: Path) -> None:
    """Every series of a single process, with the same values, from two processes' multiprocess files (the
    inter-token histogram that takes a reply's gaps in one call included)."""
    one = _parse(_metrics_run(0, 1, {}))
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for part in (0, 1):
        assert _metrics_run(part, 2, env) == ""
    both = _parse(_metrics_run(2, 2, env))  # a third process, as a scrape of any worker, renders the files
    assert set(both) == set(one)
    for key, value in one.items():
        assert math.isclose(both[key], value, rel_tol=1e-9, abs_tol=1e-12), key
    gaps = {
        endpoint: one["tokenrelay_inter_token_seconds_count", (("endpoint", endpoint), ("model", "m"))]
        for endpoint in ("/v1/completions", "/v1/messages", "/v1/responses")
    }
    assert gaps == {"/v1/completions": 400, "/v1/messages": 200, "/v1/responses": 0}


def test_serve_help_shows_the_workers_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--workers WORKERS" in out and "upstream and replay engines" in out and "(default: 1)" in out
