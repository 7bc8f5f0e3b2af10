"""Which hop holds a stream, from what it leaves in the headers and from the shape of the hold; and its fix.

Sans-I/O, standard library only. :func:`sightings` reads the response headers for the marks proxies, caches
and CDNs leave (``Server``, ``Via``, ``X-Varnish``, ``X-Cache``, ``Age``, CDN request and ray ids,
``Alt-Svc``); :func:`blame` weighs them with what the timing showed and returns the hop to name and the fix in
that hop's own directives. The rules, first match wins (issue 13 found each of the shapes with a real proxy):

==========================================  =================================================================
evidence                                    hop blamed for a held stream
==========================================  =================================================================
``ETag`` on a stream                        middleware that hashes the whole body (ETag / conditional GET)
bursts released every ~200-330 ms, no       HAProxy without ``option http-no-delay``: it sends with MSG_MORE
proxy named that buffers (or HAProxy)       and the kernel lets the data out on its 200 ms timer, so bursts
                                            come on a clock, whatever their size or the compression
a named proxy, compressing                  that proxy's compressor (nginx ``gzip_types``, Varnish
                                            ``do_gzip``, Caddy ``encode``, Apache ``no-gzip``…)
a named proxy                               that proxy's buffering (Varnish ``do_stream``, Caddy
                                            ``buffer_responses``, nginx ``proxy_buffering``…)
compressing, no proxy named                 the compressor; candidates listed per proxy and middleware
``Content-Length`` on a stream              middleware or a hop that needs the whole body
nothing                                     "a buffering hop", with what was seen and the candidates
==========================================  =================================================================

A proxy that leaves no mark (HAProxy, Apache without ``ProxyVia``, Traefik) cannot be named from the headers;
the report then says what it saw and lists the candidates rather than guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "COMPRESSION",
    "DELAY",
    "PROXIES",
    "UNKNOWN",
    "Blame",
    "Proxy",
    "Sighting",
    "blame",
    "is_send_delay",
    "seen",
    "sightings",
]


@dataclass(frozen=True)
class Proxy:
    """A kind of hop and its fixes: ``buffering`` for a held stream, ``compression`` for a compressed one."""

    key: str
    name: str
    buffering: str
    compression: str


NGINX = Proxy(
    "nginx",
    "nginx",
    "nginx: proxy_buffering off; in the stream's location (or let the server's X-Accel-Buffering: no through: "
    "take it out of proxy_ignore_headers); fastcgi_buffering off / uwsgi_buffering off for those upstreams",
    "nginx: take text/event-stream out of gzip_types (or gzip off; in the stream's location); if the stream "
    "is still held after that, look at proxy_buffering",
)
APACHE = Proxy(
    "apache",
    "Apache httpd",
    "Apache: mod_proxy_http passes each read on by itself, so look for an output filter on the stream "
    "(mod_deflate, mod_substitute, mod_sed) and remove it with SetEnv no-gzip 1 or RemoveOutputFilter; "
    "ProxyPass ... flushpackets=on applies only to mod_proxy_fcgi and mod_proxy_ajp backends",
    "Apache: SetEnv no-gzip 1 in the stream's <Location> (or take text/event-stream out of "
    "AddOutputFilterByType DEFLATE)",
)
HAPROXY = Proxy(
    "haproxy",
    "HAProxy",
    "HAProxy: option http-no-delay in the backend (or defaults) section, so it stops waiting for more data "
    "before it sends; and make sure no filter holds the body (http-buffer-request is for requests only)",
    "HAProxy: list in compression type only the types to compress, without text/event-stream (it also "
    "leaves alone responses with Cache-Control: no-transform); option http-no-delay as well",
)
CADDY = Proxy(
    "caddy",
    "Caddy",
    "Caddy: remove buffer_responses (Caddy 2.7+: response_buffers) from reverse_proxy; give streams that "
    "are not text/event-stream flush_interval -1",
    "Caddy: give encode a match block that lists the types to compress and leaves out text/event-stream "
    "(match { header Content-Type text/html* }), or send Cache-Control: no-transform, which encode honours",
)
VARNISH = Proxy(
    "varnish",
    "Varnish",
    'Varnish: in vcl_backend_response, if (beresp.http.Content-Type ~ "text/event-stream") { set '
    "beresp.do_stream = true; set beresp.uncacheable = true; } (or return (pass) for the stream's URL in "
    "vcl_recv)",
    'Varnish: in vcl_backend_response, if (beresp.http.Content-Type ~ "text/event-stream") { set '
    "beresp.do_gzip = false; }",
)
CLOUDFLARE = Proxy(
    "cloudflare",
    "Cloudflare",
    "Cloudflare: a Cache Rule that bypasses the cache for the stream's path, and send Content-Type: "
    "text/event-stream (Cloudflare streams it then); no Workers or Transform Rules that read the whole body",
    "Cloudflare: a Compression Rule that disables compression for text/event-stream, or send "
    "Cache-Control: no-transform",
)
CLOUDFRONT = Proxy(
    "cloudfront",
    "Amazon CloudFront",
    "CloudFront: a cache behaviour for the stream's path with the CachingDisabled policy; no Lambda@Edge "
    "response function on it (it needs the whole body)",
    "CloudFront: turn off 'Compress objects automatically' in the stream's cache behaviour",
)
FASTLY = Proxy(
    "fastly",
    "Fastly",
    "Fastly: return(pass) for the stream's path in vcl_recv and set beresp.do_stream = true in vcl_fetch "
    "(streaming miss)",
    "Fastly: no beresp.gzip / dynamic compression for text/event-stream",
)
AKAMAI = Proxy(
    "akamai",
    "Akamai",
    "Akamai: a rule for the stream's path with Caching: no-store and response buffering/prefetch off",
    "Akamai: leave text/event-stream out of Last Mile Acceleration (gzip)",
)
CDN = Proxy(
    "cdn",
    "a CDN",
    "a CDN: bypass its cache for the stream's path and turn off anything that reads the whole response "
    "(edge functions, body transforms)",
    "a CDN: turn off its compression for text/event-stream, or send Cache-Control: no-transform",
)
ENVOY = Proxy(
    "envoy",
    "Envoy",
    "Envoy: no buffer filter on the stream's route; a response-side Lua or ext_proc filter must stream too",
    "Envoy: leave text/event-stream out of the compressor filter's content_type list",
)
TRAEFIK = Proxy(
    "traefik",
    "Traefik",
    "Traefik: remove the buffering middleware from the stream's router",
    "Traefik: add text/event-stream to the compress middleware's excludedContentTypes",
)
SQUID = Proxy(
    "squid",
    "Squid",
    "Squid: cache deny for the stream's URL, and no ICAP/eCAP response adaptation on it",
    "Squid: no response compression adaptation on text/event-stream",
)
MIDDLEWARE = Proxy(
    "middleware",
    "application middleware",
    "middleware: exclude text/event-stream from anything that needs the whole body (ETag hashing and "
    "conditional GET, Content-Length, response caching, body logging; Werkzeug/Flask: no make_conditional "
    "or add_etag on a streamed response)",
    "middleware: skip text/event-stream in GZip middleware (Starlette/FastAPI GZipMiddleware, Flask-Compress "
    "COMPRESS_MIMETYPES, Django GZipMiddleware on a StreamingHttpResponse)",
)

PROXIES = {
    p.key: p
    for p in (
        NGINX,
        APACHE,
        HAPROXY,
        CADDY,
        VARNISH,
        CLOUDFLARE,
        CLOUDFRONT,
        FASTLY,
        AKAMAI,
        CDN,
        ENVOY,
        TRAEFIK,
        SQUID,
        MIDDLEWARE,
    )
}
UNKNOWN = "unknown"
DELAY = "delay"
COMPRESSION = "compression"

# (header, lower-case substring, proxy key): the first rows are the more specific (Fastly runs Varnish).
_MARKS: tuple[tuple[str, str, str], ...] = (
    ("x-served-by", "cache-", "fastly"),
    ("x-fastly-request-id", "", "fastly"),
    ("cf-ray", "", "cloudflare"),
    ("server", "cloudflare", "cloudflare"),
    ("x-amz-cf-id", "", "cloudfront"),
    ("via", "cloudfront", "cloudfront"),
    ("x-cache", "cloudfront", "cloudfront"),
    ("server", "akamaighost", "akamai"),
    ("x-akamai-request-id", "", "akamai"),
    ("akamai-grn", "", "akamai"),
    ("x-azure-ref", "", "cdn"),
    ("via", "google", "cdn"),
    ("x-vercel-id", "", "cdn"),
    ("x-nf-request-id", "", "cdn"),
    ("via", "varnish", "varnish"),
    ("x-varnish", "", "varnish"),
    ("server", "varnish", "varnish"),
    ("server", "nginx", "nginx"),
    ("server", "openresty", "nginx"),
    ("server", "tengine", "nginx"),
    ("via", "nginx", "nginx"),
    ("server", "caddy", "caddy"),
    ("via", "caddy", "caddy"),
    ("server", "apache", "apache"),
    ("via", "apache", "apache"),
    ("server", "envoy", "envoy"),
    ("x-envoy-upstream-service-time", "", "envoy"),
    ("server", "traefik", "traefik"),
    ("via", "haproxy", "haproxy"),
    ("server", "haproxy", "haproxy"),
    ("via", "squid", "squid"),
    ("server", "squid", "squid"),
)
# Headers worth quoting when nothing is named: they say something about the path even when they name no one.
_NOTABLE = (
    "server",
    "via",
    "x-cache",
    "age",
    "alt-svc",
    "vary",
    "content-encoding",
    "content-length",
    "etag",
)


@dataclass(frozen=True)
class Sighting:
    """A proxy the headers name: its key in :data:`PROXIES` and the header that named it."""

    proxy: str
    evidence: str


@dataclass(frozen=True)
class Blame:
    """The hop to name and its fix. ``proxy`` is the :data:`PROXIES` key, ``DELAY`` (the send-delay shape)
    or ``UNKNOWN``; ``problem`` is ``"buffering"``, ``COMPRESSION``, ``DELAY`` or ``"whole-body"``."""

    hop: str
    fix: str
    proxy: str
    problem: str


def sightings(headers: Mapping[str, str]) -> list[Sighting]:
    """Every proxy the headers name, once each, in the order of :data:`_MARKS` (most specific first)."""
    found: dict[str, Sighting] = {}
    for header, mark, key in _MARKS:
        value = headers.get(header)
        if value is None or key in found:
            continue
        if mark in value.lower():
            found[key] = Sighting(key, f"{_title(header)}: {value}")
    if "fastly" in found:
        found.pop("varnish", None)  # Fastly's edge is Varnish; the specific name wins
    return list(found.values())


def seen(headers: Mapping[str, str], *, besides: str = "") -> str:
    """What the headers say about the path, for a report that cannot name the hop (``besides``: a header
    the report already quotes)."""
    parts = [f"{_title(h)}: {headers[h]}" for h in _NOTABLE if h in headers and h != besides]
    if "via" not in headers:
        parts.append("no Via")
    return "; ".join(parts) if parts else "no identifying headers"


def _title(header: str) -> str:
    return "-".join(part.upper() if part in ("cf", "id") else part.capitalize() for part in header.split("-"))


def is_send_delay(period_ms: float | None, burst_items: int) -> bool:
    """Bursts on a ~200 ms clock: what a hop that sends with MSG_MORE (HAProxy's default) leaves behind."""
    return period_ms is not None and 170.0 <= period_ms <= 340.0 and burst_items >= 2


def blame(
    headers: Mapping[str, str],
    *,
    coding: str | None,
    bursts_period_ms: float | None = None,
    burst_items: int = 0,
) -> Blame:
    """The hop to name for a held stream and its fix (rules in the module docstring). ``coding`` is the
    response's content coding (None for identity); ``bursts_period_ms`` and ``burst_items`` describe the
    releases when the hold came in bursts."""
    named = sightings(headers)
    keys = [s.proxy for s in named]
    if "etag" in headers:
        whole = " and ".join(n for n in ("ETag", "Content-Length") if n.lower() in headers)
        hop = f"middleware that needs the whole body ({whole} on a stream)"
        return Blame(hop, MIDDLEWARE.buffering, "middleware", "whole-body")
    buffering_named = [k for k in keys if k != "haproxy"]
    if is_send_delay(bursts_period_ms, burst_items) and not buffering_named:
        hop = (
            f"a hop that waits before it sends: releases every {bursts_period_ms:.0f} ms, on the ~200 ms clock "
            "of HAProxy without option http-no-delay (nothing in the headers names a proxy)"
        )
        if "haproxy" in keys:
            hop = f"HAProxy ({named[keys.index('haproxy')].evidence}) waits before it sends"
        fix = HAPROXY.buffering + (f"; and for the compression: {HAPROXY.compression}" if coding else "")
        return Blame(hop, fix, "haproxy" if "haproxy" in keys else DELAY, DELAY)
    if named:
        first = named[0]
        proxy = PROXIES[first.proxy]
        if coding:
            hop = f"{proxy.name}'s compression (Content-Encoding: {coding}; {first.evidence})"
            return Blame(hop, proxy.compression, proxy.key, COMPRESSION)
        return Blame(f"{proxy.name} buffering ({first.evidence})", proxy.buffering, proxy.key, "buffering")
    if coding:
        hop = f"compression (Content-Encoding: {coding}; no proxy named: {seen(headers, besides='content-encoding')})"
        return Blame(hop, candidates(COMPRESSION), UNKNOWN, COMPRESSION)
    if "content-length" in headers:
        hop = "middleware that needs the whole body (Content-Length on a stream)"
        return Blame(hop, MIDDLEWARE.buffering, "middleware", "whole-body")
    hop = f"a buffering hop: reverse proxy, CDN or middleware (nothing names it: {seen(headers)})"
    return Blame(hop, candidates("buffering"), UNKNOWN, "buffering")


_CANDIDATES = (NGINX, APACHE, HAPROXY, CADDY, VARNISH, CDN, MIDDLEWARE)


def candidates(problem: str) -> str:
    """Each common hop's fix for ``problem`` (``"buffering"`` or ``COMPRESSION``), for an unnamed hop."""
    fixes = [p.compression if problem == COMPRESSION else p.buffering for p in _CANDIDATES]
    return "the headers name no hop; by candidate — " + " | ".join(fixes)
