"""The doctor through a real Varnish (Debian's varnishd on loopback, VCL compiled per test) in front of
tokenrelay's server and of a chat endpoint tokenrelay does not own.

Varnish leaves ``Via: 1.1 varnish`` and ``X-Varnish``, so the doctor names it (issue 13: it was called
"middleware" for the Content-Length Varnish adds to a stream it did not stream). The built-in VCL passes a
POST, and a passed response streams (``do_stream`` is on by default), so the defaults pass; ``do_stream =
false`` holds the whole body and ``do_gzip = true`` compresses it in blocks; the fix VCL undoes both for
event streams.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxies.apps import assert_clean, other_upstream, relay_upstream
from proxies.harness import binary, varnish_proxy
from tokenrelay.doctor._proxies import VARNISH
from tokenrelay.doctor._report import Status
from tokenrelay.doctor.probe import DoctorOptions, run_doctor

pytestmark = pytest.mark.skipif(
    binary("varnishd") is None,
    reason="Varnish is not installed (apt-get install -y varnish; the Makefile's SYSTEM_PACKAGES has it)",
)

DIAG = DoctorOptions(events=30, cadence_ms=50.0, seed=7, cancel=False)
NO_STREAM = "set beresp.do_stream = false;"
GZIP = "set beresp.do_gzip = true;"
FIX = (
    'if (beresp.http.Content-Type ~ "text/event-stream") {\n    set beresp.do_stream = true;\n'
    "    set beresp.do_gzip = false;\n}"
)


@pytest.fixture(scope="module")
def relay() -> Iterator[int]:
    with relay_upstream() as port:
        yield port


async def test_defaults_pass_and_varnish_is_seen(relay: int) -> None:
    with varnish_proxy(relay, "") as url:
        report = await run_doctor(url, DoctorOptions(events=30, cadence_ms=50.0, seed=7))
    assert_clean(report)
    assert not report.failed and report.check("timing").status is Status.PASS, report.render_text()
    assert report.check("cancel").status is Status.PASS
    assert "varnish" in str(report.facts["headers"]).lower()


async def test_streaming_off_is_one_lump_named_varnish_with_do_stream(relay: int) -> None:
    with varnish_proxy(relay, NO_STREAM) as url:
        report = await run_doctor(url, DIAG)
    assert_clean(report)
    timing = report.check("timing")
    assert timing.status is Status.FAIL and timing.message.startswith("one lump"), report.render_text()
    assert timing.hop is not None and timing.hop.startswith("Varnish buffering (Via: 1.1 varnish")
    assert timing.fix == VARNISH.buffering and "do_stream = true" in timing.fix


async def test_gzip_is_named_varnish_compression_with_do_gzip(relay: int) -> None:
    with varnish_proxy(relay, GZIP) as url:
        report = await run_doctor(url, DIAG)
    assert_clean(report)
    timing = report.check("timing")
    assert timing.status is Status.FAIL, report.render_text()
    assert timing.hop is not None and timing.hop.startswith("Varnish's compression (Content-Encoding: gzip")
    assert timing.fix == VARNISH.compression and "do_gzip = false" in timing.fix
    assert report.check("content-encoding").status is Status.FAIL


async def test_the_fix_vcl_makes_both_pass(relay: int) -> None:
    with varnish_proxy(relay, f"{NO_STREAM}\n{GZIP}\n{FIX}") as url:
        report = await run_doctor(url, DIAG)
    assert not report.failed and report.check("timing").status is Status.PASS, report.render_text()
    assert report.check("content-encoding").status is Status.PASS


async def test_chat_mode_fails_a_stream_varnish_held_to_the_end() -> None:
    with other_upstream() as other, varnish_proxy(other, NO_STREAM) as url:
        report = await run_doctor(url, DoctorOptions(mode="chat", timeout=15.0))
    assert_clean(report)
    timing = report.check("timing")
    assert timing.status is Status.FAIL and timing.message.startswith("one lump"), report.render_text()
    assert "the headers came only with the body" in timing.message and "Via: 1.1 varnish" in timing.message
    assert timing.hop is not None and timing.hop.startswith("Varnish buffering")
    assert report.exit_status == 1
