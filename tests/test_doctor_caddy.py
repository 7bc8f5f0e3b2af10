"""The doctor through a real Caddy (Debian's /usr/bin/caddy on loopback) in front of tokenrelay's server and of
a chat endpoint tokenrelay does not own.

Caddy says ``Server: Caddy``. Its reverse proxy flushes text/event-stream at once, so the defaults pass;
``buffer_responses`` holds the whole body. Its ``encode`` decides from the *first write*: at 512 bytes or
more (and without ``Cache-Control: no-transform``) it compresses, and then holds the stream in the
compressor. tokenrelay's chat stream opens with a 15-byte comment and says no-transform, so Caddy leaves it
alone; the probe must do the same whatever its seed (issue 13: about one seed in six made the old probe's
first write big enough, and the doctor failed a deployment whose chat streams were fine).

Caddy 2.6.2 also cuts about one stream in ten here (see ``proxies.apps.doctor_through_caddy``); the runs
are repeated when that happens.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxies.apps import assert_clean, doctor_through_caddy, other_upstream, relay_upstream
from proxies.harness import binary, caddy_proxy
from tokenrelay.doctor._payload import DiagnosticPlan
from tokenrelay.doctor._proxies import CADDY
from tokenrelay.doctor._report import Status
from tokenrelay.doctor.probe import DoctorOptions

pytestmark = pytest.mark.skipif(
    binary("caddy") is None,
    reason="Caddy is not installed (apt-get install -y caddy; the Makefile's SYSTEM_PACKAGES has it)",
)

PROXY = "reverse_proxy {upstream}"
ENCODE = "encode gzip\n" + PROXY
BUFFERED = "reverse_proxy {upstream} {\n\tbuffer_responses\n}"
ENCODE_FIXED = "encode {\n\tgzip\n\tmatch {\n\t\theader Content-Type text/html*\n\t}\n}\n" + PROXY
# Seeds whose first random write is over Caddy's 512-byte minimum: without the opening comment, the probe's
# first write would be that big and Caddy would compress it.
BIG_FIRST_WRITE = [s for s in range(200) if DiagnosticPlan("x", s, events=20).cuts[1][1] >= 512][:3]


@pytest.fixture(scope="module")
def relay() -> Iterator[int]:
    with relay_upstream() as port:
        yield port


async def test_defaults_pass(relay: int) -> None:
    with caddy_proxy(relay, PROXY) as url:
        report = await doctor_through_caddy(url, DoctorOptions(events=30, cadence_ms=50.0, seed=11))
    assert_clean(report)
    assert not report.failed and report.check("timing").status is Status.PASS, report.render_text()
    assert report.check("cancel").status is Status.PASS


async def test_encode_leaves_the_probe_alone_for_every_seed_as_it_leaves_chat_streams(relay: int) -> None:
    assert len(BIG_FIRST_WRITE) == 3
    with caddy_proxy(relay, ENCODE) as url:
        chat = await doctor_through_caddy(url, DoctorOptions(mode="chat", timeout=15.0))
        probes = [
            await doctor_through_caddy(
                url, DoctorOptions(events=20, cadence_ms=40.0, seed=seed, cancel=False)
            )
            for seed in BIG_FIRST_WRITE
        ]
    for report in (chat, *probes):
        assert not report.failed, report.render_text()
        assert report.check("content-encoding").status is Status.PASS, report.render_text()
        assert report.check("timing").status is Status.PASS, report.render_text()
    assert (
        f"seed {BIG_FIRST_WRITE[0]} (replay: --seed {BIG_FIRST_WRITE[0]})" in probes[0].check("probe").message
    )


async def test_buffer_responses_is_one_lump_named_caddy(relay: int) -> None:
    with caddy_proxy(relay, BUFFERED) as url:
        report = await doctor_through_caddy(
            url, DoctorOptions(events=30, cadence_ms=50.0, seed=11, cancel=False)
        )
    assert_clean(report)
    timing = report.check("timing")
    assert timing.status is Status.FAIL and timing.message.startswith("one lump"), report.render_text()
    assert timing.hop is not None and timing.hop.startswith("Caddy buffering (Server: Caddy")
    assert timing.fix == CADDY.buffering and "buffer_responses" in timing.fix


async def test_encode_holding_a_chat_stream_fails_named_caddy_and_the_match_fix_passes() -> None:
    with other_upstream() as other:
        with caddy_proxy(other, ENCODE) as url:
            report = await doctor_through_caddy(url, DoctorOptions(mode="chat", timeout=15.0))
        with caddy_proxy(other, ENCODE_FIXED) as url:
            fixed = await doctor_through_caddy(url, DoctorOptions(mode="chat", timeout=15.0))
    assert_clean(report)
    timing = report.check("timing")
    assert timing.status is Status.FAIL and timing.message.startswith("one lump"), report.render_text()
    assert timing.hop is not None and timing.hop.startswith("Caddy's compression (Content-Encoding: gzip")
    assert timing.fix == CADDY.compression and "match" in timing.fix
    assert report.exit_status == 1
    assert not fixed.failed and fixed.check("timing").status is Status.PASS, fixed.render_text()
    assert fixed.check("content-encoding").status is Status.PASS
