"""The doctor through a real Apache httpd (Debian's apache2 on loopback, mod_proxy_http) in front of tokenrelay.

mod_proxy_http passes each read from the upstream on as it comes, so the defaults stream. mod_deflate on
text/event-stream compresses the stream (it ignores no-transform) and, flushed by mod_proxy at every read,
still streams: a warning naming compression, whose fix is ``SetEnv no-gzip 1``. Apache leaves no header
unless ``ProxyVia`` is on, so without it the doctor lists the candidates; with it, it names Apache.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxies.apps import assert_clean, relay_upstream
from proxies.harness import apache_proxy, binary
from tokenrelay.doctor._proxies import APACHE
from tokenrelay.doctor._report import Status
from tokenrelay.doctor.probe import DoctorOptions, run_doctor

pytestmark = pytest.mark.skipif(
    binary("apache2") is None,
    reason="Apache httpd is not installed (apt-get install -y apache2; the Makefile's SYSTEM_PACKAGES has it)",
)

OPTIONS = DoctorOptions(events=30, cadence_ms=50.0, seed=5, cancel=False)
DEFLATE = "AddOutputFilterByType DEFLATE text/event-stream"


@pytest.fixture(scope="module")
def relay() -> Iterator[int]:
    with relay_upstream() as port:
        yield port


async def test_defaults_pass(relay: int) -> None:
    with apache_proxy(relay, "") as url:
        report = await run_doctor(url, DoctorOptions(events=30, cadence_ms=50.0, seed=5))
    assert_clean(report)
    assert not report.failed and report.check("timing").status is Status.PASS, report.render_text()
    assert report.check("cancel").status is Status.PASS


async def test_deflate_is_a_warning_listing_candidates_when_apache_leaves_no_mark(relay: int) -> None:
    with apache_proxy(relay, DEFLATE) as url:
        report = await run_doctor(url, OPTIONS)
    assert_clean(report)
    encoding = report.check("content-encoding")
    assert encoding.status is Status.WARN and "events still arrived one by one" in encoding.message
    assert encoding.fix is not None and encoding.fix.startswith("the headers name no hop")
    assert APACHE.compression in encoding.fix and "SetEnv no-gzip 1" in encoding.fix
    assert report.check("timing").status is Status.PASS and not report.failed


async def test_with_proxy_via_apache_is_named_and_no_gzip_fixes_it(relay: int) -> None:
    with apache_proxy(relay, f"ProxyVia Full\n{DEFLATE}") as url:
        report = await run_doctor(url, OPTIONS)
    encoding = report.check("content-encoding")
    assert encoding.status is Status.WARN, report.render_text()
    assert encoding.hop is not None and "(Apache/" in encoding.hop and encoding.fix == APACHE.compression
    with apache_proxy(relay, f"ProxyVia Full\n{DEFLATE}\nSetEnv no-gzip 1") as url:
        fixed = await run_doctor(url, OPTIONS)
    assert_clean(fixed)
    assert not fixed.failed and fixed.check("content-encoding").status is Status.PASS, fixed.render_text()
    assert fixed.check("timing").status is Status.PASS
