"""The doctor through a real nginx (Debian's /usr/sbin/nginx on loopback) in front of tokenrelay's server.

Each case is a ``tests/nginx/*.location`` file; the doctor must reach that case's verdict and point at the
right hop. The upstream is ``create_app`` with the replay engine and the diagnostic routes, on uvicorn's h11
protocol (see ``tests/nginx/harness.py`` for why the protocol matters to nginx's buffering).

Robustness on a loaded 2-core machine: 40 writes 50 ms apart (2 s per stream) of about 300 bytes each, so a
1 KiB proxy buffer releases every 3 or 4 writes and gzip's output buffer never fills before the end; the
verdict thresholds are ratios of the measured cadence (see ``tokenrelay.doctor._verdict``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from _uvicorn import serve
from nginx.harness import NGINX, nginx_proxy
from tokenrelay import load_tokenizer
from tokenrelay.doctor._checks import FIX_NGINX
from tokenrelay.doctor._proxies import NGINX as NGINX_PROXY
from tokenrelay.doctor._report import Report, Status
from tokenrelay.doctor.probe import DoctorOptions, run_doctor
from tokenrelay.engines import ReplayEngine
from tokenrelay.server import create_app

pytestmark = pytest.mark.skipif(
    not NGINX.is_file(), reason="nginx is not installed (apt-get install -y nginx); CI must install it"
)

CORPUS = (Path(__file__).resolve().parent / "data" / "multilingual.txt").read_bytes().decode("utf-8")
OPTIONS = DoctorOptions(events=40, cadence_ms=50.0, seed=20251130)


@pytest.fixture(scope="module")
def upstream_port() -> Iterator[int]:
    app = create_app(ReplayEngine(load_tokenizer("smollm2"), CORPUS, rate=50.0))
    with serve(app, http="h11") as url:
        yield int(urlsplit(url).port or 0)


async def doctor(port: int, case: str) -> Report:
    with nginx_proxy(port, case) as url:
        report = await run_doctor(url, OPTIONS)
    assert report.mode == "diagnostics", report.render_text()
    # Whatever the proxy does to the timing, it must not damage a byte, and the close must reach the server.
    for name in ("bytes", "text", "end", "cancel"):
        assert report.check(name).status is Status.PASS, report.render_text()
    assert report.check("x-accel-buffering").message.startswith("not visible: nginx")
    return report


@pytest.mark.parametrize("case", ["defaults", "buffering-off"])
async def test_honoured_x_accel_buffering_and_buffering_off_pass(upstream_port: int, case: str) -> None:
    report = await doctor(upstream_port, case)
    assert not report.failed and report.check("timing").status is Status.PASS, report.render_text()
    assert report.check("content-encoding").status is Status.PASS


async def test_ignored_x_accel_buffering_with_small_buffers_is_bursts(upstream_port: int) -> None:
    report = await doctor(upstream_port, "ignore-accel-small-buffers")
    timing = report.check("timing")
    assert timing.status is Status.FAIL and timing.message.startswith("bursts of "), report.render_text()
    assert timing.hop is not None and timing.hop.startswith("nginx buffering (Server: nginx")
    assert timing.fix == FIX_NGINX
    relay = report.facts["relay"]
    assert (
        isinstance(relay, dict)
        and 600 <= sorted(relay["group_bytes"])[len(relay["group_bytes"]) // 2] <= 2100
    )
    assert report.exit_status == 1


async def test_gzip_that_still_streams_is_a_warning_naming_gzip(upstream_port: int) -> None:
    report = await doctor(upstream_port, "gzip")
    encoding = report.check("content-encoding")
    assert encoding.status is Status.WARN and encoding.message.startswith("gzip ("), report.render_text()
    assert "events still arrived one by one" in encoding.message
    assert report.check("timing").status is Status.PASS and not report.failed


async def test_gzip_behind_proxy_buffering_is_one_lump_pointing_at_compression(upstream_port: int) -> None:
    report = await doctor(upstream_port, "gzip-buffered")
    timing = report.check("timing")
    assert timing.status is Status.FAIL and timing.message.startswith("one lump at the end"), (
        report.render_text()
    )
    assert timing.hop is not None and timing.hop.startswith(
        "nginx's compression (Content-Encoding: gzip; Server: nginx"
    )
    assert timing.fix == NGINX_PROXY.compression and "gzip_types" in timing.fix
    assert report.check("content-encoding").status is Status.FAIL
