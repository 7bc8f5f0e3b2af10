"""Naming the hop, without a network: the marks each proxy and CDN leaves, the shape of HAProxy's send delay,
the candidates listed for an unnamed hop, chat-mode failures on clear evidence, and chains of hops."""

from __future__ import annotations

import pytest

from tokenrelay.doctor._chain import ChainReport, judge_chain
from tokenrelay.doctor._checks import FIX_NAIVE_SPLIT
from tokenrelay.doctor._diagnose import diagnose_chat, unreachable
from tokenrelay.doctor._proxies import (
    CADDY,
    HAPROXY,
    MIDDLEWARE,
    NGINX,
    VARNISH,
    blame,
    candidates,
    is_send_delay,
    sightings,
)
from tokenrelay.doctor._recording import Chunk, Exchange
from tokenrelay.doctor._report import Check, Report, Status

SSE = {"content-type": "text/event-stream", "cache-control": "no-cache"}


@pytest.mark.parametrize(
    ("headers", "proxy"),
    [
        ({"server": "nginx/1.22.1"}, "nginx"),
        ({"server": "openresty"}, "nginx"),
        ({"server": "Caddy, uvicorn"}, "caddy"),
        ({"via": "1.1 127.0.0.1:8080 (Apache/2.4.71)", "server": "uvicorn"}, "apache"),
        ({"via": "1.1 varnish (Varnish/7.1)", "x-varnish": "32770", "age": "0"}, "varnish"),
        ({"x-varnish": "5"}, "varnish"),
        ({"server": "cloudflare", "cf-ray": "8a1b2c3d4e5f-AMS", "alt-svc": 'h3=":443"'}, "cloudflare"),
        (
            {"via": "1.1 abc.cloudfront.net (CloudFront)", "x-amz-cf-id": "xyz", "x-cache": "Miss"},
            "cloudfront",
        ),
        ({"via": "1.1 varnish", "x-served-by": "cache-ams21-AMS", "x-cache": "MISS"}, "fastly"),
        ({"server": "AkamaiGHost"}, "akamai"),
        ({"server": "envoy", "x-envoy-upstream-service-time": "3"}, "envoy"),
        ({"via": "1.1 google"}, "cdn"),
    ],
)
def test_sightings_name_the_proxy_from_its_marks(headers: dict[str, str], proxy: str) -> None:
    found = sightings(headers)
    assert found and found[0].proxy == proxy
    assert ":" in found[0].evidence  # the header that named it, quoted


def test_origin_servers_are_not_proxies() -> None:
    for server in ("uvicorn", "hypercorn", "Werkzeug/3.0.1 Python/3.11.7", "gunicorn"):
        assert sightings({"server": server}) == []


def test_named_proxy_gets_its_own_fix_for_buffering_and_for_compression() -> None:
    varnish = {"via": "1.1 varnish (Varnish/7.1)", "x-varnish": "2", "content-length": "12259"}
    held = blame(varnish, coding=None)
    assert held.proxy == "varnish" and held.fix == VARNISH.buffering  # not "middleware" for Content-Length
    assert held.hop.startswith("Varnish buffering (Via: 1.1 varnish")
    gzip = blame({"server": "Caddy"}, coding="gzip")
    assert gzip.fix == CADDY.compression and gzip.problem == "compression"
    assert blame({"server": "nginx"}, coding=None).fix == NGINX.buffering


def test_bursts_on_a_200_ms_clock_with_no_proxy_named_point_at_haproxys_send_delay() -> None:
    assert is_send_delay(250.0, 5) and is_send_delay(205.0, 4)
    assert not is_send_delay(1000.0, 20) and not is_send_delay(250.0, 1) and not is_send_delay(None, 5)
    plain = blame({"server": "uvicorn"}, coding=None, bursts_period_ms=252.0, burst_items=5)
    assert plain.proxy == "delay" and "HAProxy without option http-no-delay" in plain.hop
    assert plain.fix == HAPROXY.buffering
    compressed = blame({"server": "uvicorn"}, coding="gzip", bursts_period_ms=248.0, burst_items=5)
    assert compressed.problem == "delay" and compressed.fix.startswith(HAPROXY.buffering)
    assert "compression type" in compressed.fix  # and its compression fix, second
    # A proxy that names itself and buffers is blamed for its own bursts, whatever their period.
    assert blame({"server": "nginx"}, coding=None, bursts_period_ms=250.0, burst_items=4).proxy == "nginx"


def test_an_unnamed_hop_says_what_was_seen_and_lists_the_candidates() -> None:
    found = blame({"server": "uvicorn", "vary": "Accept-Encoding"}, coding=None)
    assert found.proxy == "unknown"
    assert "Server: uvicorn" in found.hop and "no Via" in found.hop
    for proxy in (NGINX, HAPROXY, CADDY, VARNISH, MIDDLEWARE):
        assert proxy.buffering in found.fix
    gzip = blame({"server": "uvicorn"}, coding="br")
    assert gzip.fix == candidates("compression") and "SetEnv no-gzip 1" in gzip.fix


def test_etag_is_middleware_even_behind_a_named_proxy() -> None:
    found = blame({"server": "nginx", "etag": '"x"', "content-length": "5"}, coding=None)
    assert found.proxy == "middleware" and found.fix == MIDDLEWARE.buffering


def chat_exchange(
    *, headers: dict[str, str], headers_ms: float, at: list[float], crlf: bool = False
) -> Exchange:
    eol = "\r\n" if crlf else "\n"
    chunks = [
        Chunk(t, f'data: {{"choices":[{{"delta":{{"content":"w{i} "}}}}]}}{eol}{eol}'.encode(), 40)
        for i, t in enumerate(at)
    ]
    chunks.append(Chunk(at[-1], f"data: [DONE]{eol}{eol}".encode(), 14))
    return Exchange("http://x/v1/chat/completions", 200, {**SSE, **headers}, headers_ms, chunks)


def test_chat_mode_lump_with_late_headers_is_a_fail() -> None:
    lump = [1500.0 + 0.1 * i for i in range(20)]
    late = diagnose_chat(chat_exchange(headers={"server": "uvicorn"}, headers_ms=1499.0, at=lump))
    timing = late.check("timing")
    assert timing.status is Status.FAIL and late.exit_status == 1
    assert "the headers came only with the body, 1499 ms after the request" in timing.message
    # The same lump after early headers, with nothing else to go on, stays a warning: a server may batch.
    early = diagnose_chat(chat_exchange(headers={"server": "uvicorn"}, headers_ms=3.0, at=lump))
    assert early.check("timing").status is Status.WARN and early.exit_status == 0


def test_chat_mode_lump_through_a_named_proxy_is_a_fail() -> None:
    lump = [900.0 + 0.1 * i for i in range(20)]
    report = diagnose_chat(chat_exchange(headers={"x-varnish": "7"}, headers_ms=3.0, at=lump))
    assert report.check("timing").status is Status.FAIL and "X-Varnish: 7" in report.check("timing").message


def test_naive_split_fix_only_when_it_applies() -> None:
    streamed = [50.0 * i for i in range(10)]
    lf = diagnose_chat(chat_exchange(headers={}, headers_ms=1.0, at=streamed))
    assert lf.check("framing").fix is None and lf.check("framing").status is Status.PASS
    crlf = diagnose_chat(chat_exchange(headers={}, headers_ms=1.0, at=streamed, crlf=True))
    assert crlf.check("framing").fix == FIX_NAIVE_SPLIT


def hop(url: str, timing: Status, encoding: Status = Status.PASS) -> Report:
    checks = [
        Check(Status.PASS, "status", "200"),
        Check(encoding, "content-encoding", "x"),
        Check(timing, "timing", f"{timing.value} at {url}", hop=f"proxy at {url}", fix=f"fix {url}"),
    ]
    return Report(url, "diagnostics", checks)


def test_chain_names_the_first_hop_that_holds() -> None:
    reports = [
        hop("http://origin", Status.PASS),
        hop("http://lb", Status.FAIL, Status.WARN),
        hop("http://public", Status.FAIL),
    ]
    verdict = judge_chain(reports)
    assert verdict.status is Status.FAIL
    assert verdict.message.startswith("the hold starts at hop 2 (http://lb); hop 1 (http://origin) streams")
    assert "compression is added at hop 2" in verdict.message
    assert verdict.hop == "the hop between http://origin and http://lb: proxy at http://lb"
    assert verdict.fix == "fix http://lb"
    chain = ChainReport(reports, verdict)
    assert chain.exit_status == 1 and "hop 3  http://public  FAIL" in chain.render_text()
    assert chain.to_json()["verdict"] == verdict.to_json() and "http://lb" in chain.render_html()


def test_chain_where_every_hop_streams_passes_and_a_held_origin_is_named() -> None:
    ok = judge_chain([hop("http://a", Status.PASS), hop("http://b", Status.PASS)])
    assert ok.status is Status.PASS and ok.message == "all 2 hops stream"
    origin = judge_chain([hop("http://a", Status.WARN), hop("http://b", Status.FAIL)])
    assert origin.status is Status.WARN and origin.message.startswith("hop 1 (http://a), the first")
    down = judge_chain([hop("http://a", Status.PASS), unreachable("http://b", "ConnectError")])
    assert down.status is Status.FAIL and "hop 2 (http://b) did not answer" in down.message
