"""The doctor through a real HAProxy (Debian's /usr/sbin/haproxy on loopback) in front of a streaming server.

HAProxy's defaults leave no header behind, and hold a stream in a shape of their own: it sends with MSG_MORE
while it expects more data, so the kernel lets the bytes out on its 200 ms timer and the events arrive in
bursts of about five every ~250 ms at a 50 ms cadence; ``option http-no-delay`` fixes it. With compression
on, the bursts are the same, so the fix must still be http-no-delay (issue 13: the doctor blamed gzip). And
because tokenrelay's streams say ``Cache-Control: no-transform``, HAProxy does not compress them, nor the
probe that copies their headers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxies.apps import assert_clean, other_upstream, relay_upstream
from proxies.harness import binary, haproxy_proxy
from tokenrelay.doctor._report import Status
from tokenrelay.doctor.probe import DoctorOptions, run_doctor

pytestmark = pytest.mark.skipif(
    binary("haproxy") is None,
    reason="HAProxy is not installed (apt-get install -y haproxy; the Makefile's SYSTEM_PACKAGES has it)",
)

DIAG = DoctorOptions(events=30, cadence_ms=50.0, seed=20251130, cancel=False)
CHAT = DoctorOptions(mode="chat", timeout=15.0)
NO_DELAY = "option http-no-delay"
COMPRESSION = "compression algo gzip\ncompression type text/event-stream"


@pytest.fixture(scope="module")
def relay() -> Iterator[int]:
    with relay_upstream() as port:
        yield port


@pytest.fixture(scope="module")
def other() -> Iterator[int]:
    with other_upstream() as port:
        yield port


async def test_defaults_hold_in_timed_bursts_named_haproxy_and_http_no_delay_fixes_it(relay: int) -> None:
    with haproxy_proxy(relay, "") as url:
        report = await run_doctor(url, DIAG)
    assert_clean(report)
    timing = report.check("timing")
    assert timing.status is Status.FAIL and timing.message.startswith("bursts of "), report.render_text()
    assert timing.hop is not None and "HAProxy without option http-no-delay" in timing.hop
    assert timing.fix is not None and timing.fix.startswith("HAProxy: option http-no-delay")
    assert report.exit_status == 1
    with haproxy_proxy(relay, NO_DELAY) as url:
        fixed = await run_doctor(url, DoctorOptions(events=30, cadence_ms=50.0, seed=20251130))
    assert_clean(fixed)
    assert not fixed.failed and fixed.check("timing").status is Status.PASS, fixed.render_text()
    assert fixed.check("cancel").status is Status.PASS


async def test_compression_leaves_the_probe_alone_as_it_leaves_chat_streams(relay: int) -> None:
    with haproxy_proxy(relay, f"{NO_DELAY}\n{COMPRESSION}") as url:
        probe = await run_doctor(url, DIAG)
        chat = await run_doctor(url, CHAT)
    for report in (probe, chat):
        assert not report.failed, report.render_text()
        assert report.check("content-encoding").status is Status.PASS, report.render_text()
    assert probe.check("timing").status is Status.PASS and chat.check("timing").status is Status.PASS


async def test_compressed_bursts_are_blamed_on_the_send_delay_not_on_gzip(other: int) -> None:
    with haproxy_proxy(other, COMPRESSION) as url:
        report = await run_doctor(url, CHAT)
    assert_clean(report)
    encoding, timing = report.check("content-encoding"), report.check("timing")
    assert timing.message.startswith("bursts of "), report.render_text()
    assert encoding.status is Status.FAIL and encoding.message.startswith("gzip")
    for check in (encoding, timing):
        assert check.hop is not None and "HAProxy without option http-no-delay" in check.hop
        assert (
            check.fix is not None and "option http-no-delay" in check.fix and "compression type" in check.fix
        )
    assert report.exit_status == 1
    with haproxy_proxy(other, f"{COMPRESSION}\n{NO_DELAY}") as url:  # the fix given, applied
        fixed = await run_doctor(url, CHAT)
    assert fixed.check("timing").status is Status.PASS, fixed.render_text()
    assert fixed.check("content-encoding").status is Status.WARN and not fixed.failed
