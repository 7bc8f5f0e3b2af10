"""The OpenAI-compatible streaming server (FastAPI on uvicorn) around any tokenrelay engine.

Needs the ``server`` extra (``pip install 'tokenrelay[server]'``); without it, importing this package raises
a ``ModuleNotFoundError`` that says so.
"""

from __future__ import annotations

from tokenrelay._extras import missing_extra

try:
    from .app import ServerConfig, create_app
    from .run import bind_socket, serve
except ModuleNotFoundError as exc:
    error = missing_extra(exc)
    if error is None:
        raise
    raise error from exc

__all__ = ["ServerConfig", "bind_socket", "create_app", "serve"]
