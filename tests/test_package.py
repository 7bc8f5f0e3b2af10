"""The package surface: __all__ complete and sorted, no adapter imported by the core, README code that runs."""

from __future__ import annotations

import gc
import re
import socket
import subprocess
import sys
from pathlib import Path

import tokenrelay

ROOT = Path(__file__).resolve().parents[1]


def test_all_is_sorted_and_complete() -> None:
    assert tokenrelay.__all__ == sorted(tokenrelay.__all__)
    for name in tokenrelay.__all__:
        assert hasattr(tokenrelay, name), name


def test_importing_the_package_loads_no_server_network_or_engine() -> None:
    code = (
        "import sys, tokenrelay\n"
        "bad = [m for m in ('fastapi', 'uvicorn', 'starlette', 'httpx', 'llama_cpp', 'tokenizers',"
        " 'sentencepiece', 'mistral_common', 'socket') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_readme_python_blocks_run() -> None:
    """Every python block of the README runs; the ones that talk to `make serve`'s address get a live replay
    server instead of the model (same API, same streaming path)."""
    from _uvicorn import serve
    from server_helpers import replay_app

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert len(blocks) >= 2
    app, _ = replay_app("Hello from the relay ☕", rate=None)
    # The structured-output blocks ask for JSON: their server replays a JSON reply (the replay engine does not
    # constrain, so the reply is the text it is given).
    json_app, _ = replay_app('{"name": "Paris", "country": "France"}', rate=None)
    with serve(app) as url, serve(json_app) as json_url:
        servers = {("127.0.0.1", int(u.rpartition(":")[2])) for u in (url, json_url)}
        for block in blocks:
            wants_json = "response_format" in block or "stream_json" in block
            code = block.replace("http://127.0.0.1:8000", json_url if wants_json else url)
            names: dict[str, object] = {}
            exec(compile(code, "README.md", "exec"), names)
            # While the block's names live, none of its connections is open: a client left open hands its
            # socket to the garbage collector, which may finalize the socket first and warn (ResourceWarning)
            # in whatever test runs then.
            left_open = [sock for sock in _open_sockets() if _peer(sock) in servers]
            assert not left_open, f"this README block leaves a connection open:\n{block}"
            del names


def _open_sockets() -> list[socket.socket]:
    return [o for o in gc.get_objects() if isinstance(o, socket.socket) and o.fileno() != -1]


def _peer(sock: socket.socket) -> object:
    try:
        return sock.getpeername()
    except OSError:  # not connected
        return None


# Keep a Changelog: "## [Unreleased]" first, then released versions newest first, each "## [X.Y.Z] - DATE".
_VERSION_HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?$")
_CHANGE_TYPES = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_the_changelog_latest_release_is_the_version() -> None:
    """CHANGELOG.md has the Keep a Changelog shape, and its newest released entry is what ``tokenrelay
    --version`` prints (a release renames [Unreleased] and sets ``__version__`` together)."""
    lines = (ROOT / "CHANGELOG.md").read_text("utf-8").splitlines()
    assert lines[0] == "# Changelog"
    headings = [line for line in lines if line.startswith("## ")]
    entries = [_VERSION_HEADING.match(line) for line in headings]
    assert all(entries), [h for h, m in zip(headings, entries, strict=True) if m is None]
    found = [(m["version"], m["date"]) for m in entries if m is not None]
    assert found[0] == ("Unreleased", None)
    released = found[1:]
    assert released and all(date for _, date in released), released
    numbers = [tuple(int(part) for part in version.split(".")) for version, _ in released]
    assert numbers == sorted(numbers, reverse=True) and len(set(numbers)) == len(numbers)
    dates = [date for _, date in released]
    assert dates == sorted(dates, reverse=True)
    types = {line[4:] for line in lines if line.startswith("### ")}
    assert types and types <= _CHANGE_TYPES, types - _CHANGE_TYPES
    out = subprocess.run(
        [sys.executable, "-m", "tokenrelay", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"tokenrelay {released[0][0]}" == f"tokenrelay {tokenrelay.__version__}"


def test_the_contributing_guide_names_what_exists() -> None:
    """Every ``make`` target CONTRIBUTING.md and the README name is in the Makefile, and every file or folder of
    the repository the guide names in backquotes exists (a recipe that points at a moved file is wrong)."""
    guide = (ROOT / "CONTRIBUTING.md").read_text("utf-8")
    makefile = (ROOT / "Makefile").read_text("utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*)\s*:", makefile, flags=re.M))
    for doc in (guide, (ROOT / "README.md").read_text("utf-8")):
        # `make X` in prose, and command lines in code blocks (not the verb: "make it final").
        named = re.findall(r"`make (?:-s )?([a-z][a-z-]*[a-z])(?=[\s`])", doc)
        named += re.findall(r"^make ([a-z][a-z-]*[a-z])\b", doc, flags=re.M)
        assert named
        for target in named:
            assert target in targets, f"make {target}"
    quoted = set(re.findall(r"`([^`\s]+)`", guide))
    paths = {q.rstrip("/") for q in quoted if "/" in q and not q.startswith(("http", "~", "/", "."))}
    paths = {p for p in paths if re.fullmatch(r"[\w.\-/]+", p) and "*" not in p and "NAME" not in p}
    roots = (
        "src/",
        "tests/",
        "benchmarks/",
        "docs/",
        "engines/",
        "doctor/",
        "tokenizers/",
        "server/",
        "web/",
    )
    checked = 0
    for path in sorted(paths):
        if not path.startswith(roots):
            continue
        where = [ROOT / path, ROOT / "src" / "tokenrelay" / path]
        assert any(p.exists() for p in where), path
        checked += 1
    assert checked >= 30  # the guide's paths were really read
    for name in (".pre-commit-config.yaml", "CHANGELOG.md", "LICENSE", ".ci/run"):
        assert (ROOT / name).exists(), name
    assert "CONTRIBUTING.md" in (ROOT / "README.md").read_text("utf-8")
