"""The package surface: __all__ complete and sorted, no adapter imported by the core, README code that runs."""

from __future__ import annotations

import re
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
        for block in blocks:
            wants_json = "response_format" in block or "stream_json" in block
            code = block.replace("http://127.0.0.1:8000", json_url if wants_json else url)
            exec(compile(code, "README.md", "exec"), {})
