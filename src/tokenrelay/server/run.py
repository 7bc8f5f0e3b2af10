"""Run an app with uvicorn: loopback by default, a log line per request, graceful shutdown."""

from __future__ import annotations

import logging

import uvicorn

from tokenrelay.engines.base import Engine

from .app import ServerConfig, create_app

__all__ = ["serve"]


def serve(
    engine: Engine,
    config: ServerConfig | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    graceful_timeout: int = 5,
) -> None:
    """Serve ``engine`` until interrupted. Open streams get ``graceful_timeout`` seconds to finish on
    shutdown; then they are cancelled, which stops their generations."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(engine, config)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,  # the app logs one line per generation with its timings instead
        timeout_graceful_shutdown=graceful_timeout,
    )
