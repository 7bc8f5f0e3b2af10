"""``/docs`` (and ``/redoc``): the API's endpoints as a plain HTML page, rendered on the server.

FastAPI's own ``/docs`` and ``/redoc`` load Swagger UI and ReDoc from a CDN, so a server used offline (or
behind a strict proxy) answered them with a blank page. This page needs nothing from elsewhere and runs no
script: each operation of the OpenAPI schema with its method, path and summary, the request body's fields,
and links to ``/openapi.json`` (for any OpenAPI tool) and the chat page.
"""

from __future__ import annotations

import html
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

__all__ = ["DOCS_CSP", "add_docs_routes", "render_docs"]

#: No script at all, styles only from this page's own <style> element.
DOCS_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; frame-ancestors 'none'"

_STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
    "code{font:13px ui-monospace,monospace}.op{border:1px solid #ccc;border-radius:6px;padding:.5rem 1rem;"
    "margin:.75rem 0}.m{display:inline-block;min-width:4rem;font-weight:700}.f{color:#555}"
    "@media (prefers-color-scheme:dark){body{background:#111;color:#ddd}.op{border-color:#444}.f{color:#aaa}}"
)


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Follow local ``$ref``s (``#/components/schemas/…``) to the schema they name."""
    for _ in range(16):
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        target: Any = spec
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        schema = target if isinstance(target, dict) else {}
    return schema


def _fields(spec: dict[str, Any], operation: dict[str, Any]) -> str:
    content = operation.get("requestBody", {}).get("content", {})
    schema = _resolve(spec, content.get("application/json", {}).get("schema", {}))
    names = list(schema.get("properties", {}))
    if not names:
        return ""
    required = set(schema.get("required", ()))
    shown = ", ".join(f"<code>{html.escape(n)}</code>{'*' if n in required else ''}" for n in names)
    return f'<div class="f">body: {shown}</div>'


def render_docs(spec: dict[str, Any]) -> str:
    """The page for an OpenAPI ``spec`` (what ``app.openapi()`` returns)."""
    info = spec.get("info", {})
    title = html.escape(f"{info.get('title', 'API')} {info.get('version', '')}".strip())
    ops = []
    for path, item in spec.get("paths", {}).items():
        for method, operation in item.items():
            summary = operation.get("description") or operation.get("summary") or ""
            ops.append(
                f'<div class="op"><span class="m">{html.escape(method.upper())}</span>'
                f"<code>{html.escape(path)}</code><div>{html.escape(summary)}</div>{_fields(spec, operation)}</div>"
            )
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{_STYLE}</style></head>'
        f"<body><h1>{title}</h1><p>OpenAI-compatible endpoints. The machine-readable schema is "
        '<a href="/openapi.json">/openapi.json</a>; the chat page is at <a href="/">/</a>.</p>'
        f"{''.join(ops)}</body></html>"
    )


def add_docs_routes(app: FastAPI) -> None:
    """``GET /docs`` and ``GET /redoc``: the page (build the app with ``docs_url=None, redoc_url=None``)."""
    headers = {"Content-Security-Policy": DOCS_CSP, "X-Content-Type-Options": "nosniff"}

    async def docs() -> HTMLResponse:
        return HTMLResponse(render_docs(app.openapi()), headers=headers)

    for path in ("/docs", "/redoc"):
        app.add_api_route(path, docs, methods=["GET"], include_in_schema=False)
