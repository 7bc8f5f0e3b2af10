"""The chat page: ``/`` (GET and HEAD), its modules under ``/static/``, and its libraries under ``/static/vendor/``.

The page's own files are ``tokenrelay/web/*.{html,js,css,svg}``; the modules it shares with the npm package
``tokenrelay`` are ``tokenrelay/web/lib/*.js``, served under ``/static/lib/``. Its two libraries (markdown-it, highlight.js)
come from npm; ``web/vendor.json`` names the file each one ships. A built wheel carries them in
``tokenrelay/web/vendor/`` with their licences (``hatch_build.py`` copies them from ``node_modules`` at build
time), so an installed server needs no npm (issue 14). A source checkout has no ``vendor/`` directory and is
served from the project's ``node_modules`` instead.

Every response carries the page's Content-Security-Policy: scripts and styles from this origin only, no inline
code, and Trusted Types with no policy, so no code path can turn text into HTML.
"""

from __future__ import annotations

import json
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import Response

from tokenrelay._errors import NotFoundError

__all__ = ["PAGE_CSP", "PAGE_HEADERS", "WEB_DIR", "mount_page", "vendor_files"]

WEB_DIR = Path(__file__).resolve().parents[1] / "web"
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'; "
    "require-trusted-types-for 'script'; trusted-types 'none'"
)
PAGE_HEADERS = {"Content-Security-Policy": PAGE_CSP, "X-Content-Type-Options": "nosniff"}
_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".svg": "image/svg+xml",
}


def vendor_files(web_dir: Path = WEB_DIR) -> dict[str, Path]:
    """Each library file the page imports, by its name under ``/static/vendor/``, where it is found.

    A copy shipped in ``web/vendor/`` wins; otherwise the file inside ``node_modules/<package>/`` of the
    nearest directory above ``web_dir`` that has one. A file found in neither is left out.
    """
    manifest: dict[str, dict[str, str]] = json.loads((web_dir / "vendor.json").read_text("utf-8"))
    found: dict[str, Path] = {}
    for name, entry in manifest.items():
        shipped = web_dir / "vendor" / name
        if shipped.is_file():
            found[name] = shipped
            continue
        for parent in web_dir.parents:
            candidate = parent / "node_modules" / entry["package"] / entry["path"]
            if candidate.is_file():
                found[name] = candidate
                break
    return found


def mount_page(app: FastAPI, web_dir: Path = WEB_DIR) -> None:
    """Add the page's routes to ``app`` (nothing, when ``web_dir`` has no ``index.html``)."""
    index = web_dir / "index.html"
    if not index.is_file():
        return
    files = {p.name: p for p in web_dir.iterdir() if p.suffix in _TYPES}
    lib = web_dir / "lib"
    lib_files = {p.name: p for p in lib.iterdir() if p.suffix == ".js"} if lib.is_dir() else {}
    vendor = vendor_files(web_dir)
    favicon = files.get("favicon.svg")

    def serve_file(path: Path) -> Response:
        return Response(path.read_bytes(), media_type=_TYPES[path.suffix], headers=PAGE_HEADERS)

    # HEAD as well as GET: uptime checks and `curl -I` ask with HEAD (uvicorn sends no body for it).
    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def page() -> Response:
        return serve_file(index)

    @app.api_route("/favicon.ico", methods=["GET", "HEAD"], include_in_schema=False)
    async def favicon_ico() -> Response:
        # Browsers ask for /favicon.ico on their own (a feed reader, a bookmark); the page links the SVG.
        if favicon is None:
            raise NotFoundError("/favicon.ico: no such file")
        return serve_file(favicon)

    @app.api_route("/static/vendor/{name}", methods=["GET", "HEAD"], include_in_schema=False)
    async def vendor_file(name: str) -> Response:
        path = vendor.get(name)
        if path is None:
            raise NotFoundError(
                f"/static/vendor/{name}: not installed (in a source checkout, run `npm ci` in the project)"
            )
        return serve_file(path)

    @app.api_route("/static/lib/{name}", methods=["GET", "HEAD"], include_in_schema=False)
    async def lib_file(name: str) -> Response:
        if name not in lib_files:
            raise NotFoundError(f"/static/lib/{name}: no such file")
        return serve_file(lib_files[name])

    @app.api_route("/static/{name}", methods=["GET", "HEAD"], include_in_schema=False)
    async def static(name: str) -> Response:
        if name not in files:
            raise NotFoundError(f"/static/{name}: no such file")
        return serve_file(files[name])
