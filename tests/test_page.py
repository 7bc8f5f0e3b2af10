"""server/page.py: the page's routes (GET and HEAD), its CSP, and where its npm libraries are found."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tokenrelay._errors import TokenRelayError
from tokenrelay.server.page import PAGE_CSP, WEB_DIR, mount_page, vendor_files

MANIFEST = {
    "lib.mjs": {"package": "@scope/lib", "path": "dist/lib.mjs", "license": "LICENSE"},
    "other.mjs": {"package": "other", "path": "other.mjs", "license": "LICENSE"},
}


def make_web(root: Path) -> Path:
    """A checkout-like tree: root/node_modules beside root/pkg/web."""
    web = root / "pkg" / "web"
    web.mkdir(parents=True)
    (web / "vendor.json").write_text(json.dumps(MANIFEST))
    (web / "index.html").write_text("<!doctype html><title>t</title>")
    (web / "app.js").write_text("export {};")
    (web / "lib").mkdir()
    (web / "lib" / "sse.js").write_text("export {};")
    (web / "lib" / "sse.d.ts").write_text("export {};")
    (web / "favicon.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    return web


def test_vendor_files_prefer_the_shipped_copy_then_node_modules(tmp_path: Path) -> None:
    web = make_web(tmp_path)
    assert vendor_files(web) == {}
    npm = tmp_path / "node_modules" / "@scope" / "lib" / "dist" / "lib.mjs"
    npm.parent.mkdir(parents=True)
    npm.write_text("// npm")
    assert vendor_files(web) == {"lib.mjs": npm}
    shipped = web / "vendor" / "lib.mjs"
    shipped.parent.mkdir()
    shipped.write_text("// shipped")
    assert vendor_files(web) == {"lib.mjs": shipped}


def test_the_real_manifest_names_both_libraries() -> None:
    manifest = json.loads((WEB_DIR / "vendor.json").read_text())
    assert set(manifest) == {"markdown-it.esm.min.mjs", "highlight.min.mjs"}
    assert {entry["package"] for entry in manifest.values()} == {"markdown-it", "@highlightjs/cdn-assets"}


@pytest.fixture
def client(tmp_path: Path) -> httpx.AsyncClient:
    app = FastAPI()

    # create_app's handler, which turns the page's NotFoundError into an OpenAI-shaped 404.
    @app.exception_handler(TokenRelayError)
    async def relay_error(request: Request, exc: TokenRelayError) -> JSONResponse:
        return JSONResponse(exc.to_openai(), status_code=exc.status_code)

    mount_page(app, make_web(tmp_path))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def test_get_and_head_of_the_page(client: httpx.AsyncClient) -> None:
    async with client:
        page = await client.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert page.headers["content-security-policy"] == PAGE_CSP
        assert page.headers["x-content-type-options"] == "nosniff"
        head = await client.head("/")
        assert head.status_code == 200
        assert head.headers["content-type"] == page.headers["content-type"]
        assert head.headers["content-security-policy"] == PAGE_CSP
        assert (await client.head("/static/app.js")).status_code == 200
        shared = await client.get("/static/lib/sse.js")
        assert shared.status_code == 200
        assert shared.headers["content-type"] == "text/javascript; charset=utf-8"
        assert shared.headers["content-security-policy"] == PAGE_CSP
        assert (await client.get("/static/lib/sse.d.ts")).status_code == 404  # only modules are served
        assert (await client.get("/static/lib/nope.js")).status_code == 404


async def test_favicon_and_missing_files(client: httpx.AsyncClient) -> None:
    async with client:
        for path in ("/favicon.ico", "/static/favicon.svg"):
            icon = await client.get(path)
            assert icon.status_code == 200
            assert icon.headers["content-type"] == "image/svg+xml"
        missing = await client.get("/static/vendor/lib.mjs")
        assert missing.status_code == 404
        assert "npm ci" in missing.text
        assert (await client.get("/static/nope.js")).status_code == 404


def test_no_page_without_index(tmp_path: Path) -> None:
    app = FastAPI()
    mount_page(app, tmp_path)
    assert [getattr(r, "path", None) for r in app.routes if getattr(r, "path", "") == "/"] == []
