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
    with serve(app) as url:
        for block in blocks:
            code = block.replace("http://127.0.0.1:8000", url)
            exec(compile(code, "README.md", "exec"), {})
