"""What a user types for a server (``8000``, ``localhost:8000``, ``https://host/v1``) → a URL to request.

``normalize_url`` adds what people leave out: ``http://`` when there is no scheme (``curl`` and ``ollama``
assume it too), and ``127.0.0.1`` when only a port is given. ``api_base`` turns a server address, an API root
or an endpoint into the OpenAI API root (``…/v1``) the clients append ``/chat/completions`` to. Standard
library only.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ._errors import ConfigError

__all__ = ["api_base", "normalize_url"]

_ENDPOINTS = ("/chat/completions", "/completions", "/models")


def normalize_url(text: str, *, default_host: str = "127.0.0.1") -> str:
    """``"8000"``/``":8000"`` → ``http://127.0.0.1:8000``; ``"host:8000"`` → ``http://host:8000``; a URL with
    a scheme is kept as it is. Anything but http(s) raises :class:`ConfigError`."""
    url = text.strip()
    if url.startswith(":"):
        url = url[1:]
    if url.isdigit():
        url = f"{default_host}:{url}"
    if "://" not in url:
        url = "http://" + url.removeprefix("//")
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"not an http(s) URL: {text!r} (try http://HOST:PORT)")
    try:
        parts.port  # noqa: B018 — raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ConfigError(f"bad port in {text!r}") from exc
    return url


def api_base(text: str) -> str:
    """The OpenAI API root of what the user gave: ``http://h:8000`` → ``http://h:8000/v1``;
    ``…/v1/chat/completions`` → ``…/v1``; a root that already ends in ``/v1`` is kept."""
    url = normalize_url(text).rstrip("/")
    for endpoint in _ENDPOINTS:
        if url.endswith(endpoint):
            url = url[: -len(endpoint)]
            break
    return url if url.endswith("/v1") else url + "/v1"
