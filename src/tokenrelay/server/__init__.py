"""The OpenAI-compatible streaming server (FastAPI on uvicorn) around any tokenrelay engine."""

from __future__ import annotations

from .app import ServerConfig, create_app
from .run import serve

__all__ = ["ServerConfig", "create_app", "serve"]
