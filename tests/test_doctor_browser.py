"""The doctor page in real headless Chromium (Debian's), through a real nginx: ``tokenrelay doctor URL
--browser`` records each event's network arrival, parse, hand-off to the DOM and paint, and the server judges
the page's recording with the CLI's code. With nginx buffering the stream, the hold must appear in the
network lane (the proxy's), not in the browser's lanes; without it, every lane is short."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from nginx.harness import NGINX, nginx_proxy
from proxies.apps import relay_upstream
from tokenrelay import cli
from tokenrelay.doctor.browser import chromium_path, run_in_browser

pytestmark = [
    pytest.mark.skipif(
        chromium_path() is None, reason="Chromium is not installed (apt-get install -y chromium)"
    ),
    pytest.mark.skipif(not NGINX.is_file(), reason="nginx is not installed (apt-get install -y nginx)"),
]

ARGS = ["--browser", "--events", "30", "--cadence-ms", "50", "--seed", "3", "--json"]


@pytest.fixture(scope="module")
def relay() -> Iterator[int]:
    with relay_upstream() as port:
        yield port


def browser_run(url: str, capsysbinary: pytest.CaptureFixture[bytes]) -> tuple[int, dict[str, object]]:
    status = cli.main(["doctor", url, *ARGS])
    return status, json.loads(capsysbinary.readouterr().out)


def test_the_page_and_its_files_are_served(relay: int) -> None:
    base = f"http://127.0.0.1:{relay}"
    page = httpx.get(f"{base}/doctor", timeout=10)
    assert page.status_code == 200 and "doctor.js" in page.text
    assert "trusted-types" in page.headers["content-security-policy"]
    for name in ("doctor.js", "doctor.css", "chat.js", "lib/sse.js", "lib/stats.js", "lib/reply_chat.js"):
        assert httpx.get(f"{base}/doctor/{name}", timeout=10).status_code == 200
    assert httpx.get(f"{base}/doctor/app.py", timeout=10).status_code == 404
    assert httpx.get(f"{base}/doctor/lib/react.js", timeout=10).status_code == 404


def test_through_nginx_without_buffering_every_lane_is_short(
    relay: int, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    with nginx_proxy(relay, "buffering-off") as url:
        status, result = browser_run(url, capsysbinary)
    report, lanes = result["report"], result["lanes"]
    assert isinstance(report, dict) and isinstance(lanes, dict)
    checks = {c["check"]: c for c in report["checks"]}
    assert status == 0 and checks["timing"]["status"] == "PASS", report["text"]
    assert checks["bytes"]["status"] == "PASS" and checks["text"]["status"] == "PASS"
    assert checks["browser"]["message"].startswith("held per hop: network max")
    events = result["events"]
    assert isinstance(events, list) and len(events) == 30
    for event in events:  # every hop recorded, in order
        assert event["send"] <= event["arrive"] + 0.5 <= event["parse"] + 0.5 <= event["render"] + 0.5
        assert event["render"] <= event["paint"]
    assert lanes["network"]["p90_ms"] < 150, lanes


def test_through_buffering_nginx_the_hold_is_in_the_network_lane(
    relay: int, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    with nginx_proxy(relay, "ignore-accel-small-buffers") as url:
        status, result = browser_run(url, capsysbinary)
    report, lanes = result["report"], result["lanes"]
    assert isinstance(report, dict) and isinstance(lanes, dict)
    checks = {c["check"]: c for c in report["checks"]}
    assert status == 1 and checks["timing"]["status"] == "FAIL", report["text"]
    assert checks["timing"]["hop"].startswith("nginx buffering (Server: nginx")
    assert (
        isinstance(result["svg"], str)
        and result["svg"].startswith("<svg")
        and "network arrival" in result["svg"]
    )
    network, paint = lanes["network"], lanes["paint"]
    assert network["max_ms"] >= 100 and network["max_ms"] > 2 * max(paint["max_ms"], lanes["parse"]["max_ms"])


def chat_trace(url: str) -> dict[str, Any]:
    """The doctor page's chat mode in Chromium: one real reply, with the model's step times."""
    return asyncio.run(
        run_in_browser(url, events=0, cadence_ms=0, seed=None, api_key=None, timeout=60, mode="chat")
    )


def test_a_chat_reply_through_nginx_starts_at_the_model_and_nginx_holds_it_on_the_way(relay: int) -> None:
    # The same two set-ups with a real reply (the replay engine times its steps as a model does): the model
    # lane leads every event; buffering nginx holds events in the network lane (the proxy's), never in the
    # server's own lane (model step -> send); without buffering every lane is short.
    with nginx_proxy(relay, "ignore-accel-small-buffers") as url:
        held = chat_trace(url)
    with nginx_proxy(relay, "buffering-off") as url:
        free = chat_trace(url)
    for result in (held, free):
        events = result["events"]
        assert result["mode"] == "chat" and len(events) > 10
        for event in events:
            assert event["source"] == "engine"
            assert event["stepStart"] < event["step"] <= event["send"] + 0.5 <= event["arrive"] + 1
        assert "model step · step max" in result["svg"]
    # 1 KiB buffers hold about three ~300-byte chunks (20 ms apart at 50 tokens/s) in nginx.
    lanes = {"held": held["lanes"], "free": free["lanes"]}
    assert held["lanes"]["network"]["max_ms"] >= 50, lanes
    assert held["lanes"]["network"]["p90_ms"] > 2 * free["lanes"]["network"]["p90_ms"] + 10, lanes
    # The server's lane is the server's own (a token held for the rest of its character): nginx adds nothing.
    assert held["lanes"]["server"]["max_ms"] < free["lanes"]["server"]["max_ms"] + 15, lanes
