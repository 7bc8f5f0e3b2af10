"""The server against its own OpenAPI description, fuzzed by schemathesis with every check it has (issue 12).

Positive cases (bodies the schema calls valid) must be served, negative ones refused with a 4xx; every status,
content type and event must be documented; undocumented methods get 405 with ``Allow``; requests without the
API key get 401. The run is bounded (examples per operation, a fixed seed) and must find nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _uvicorn import serve_relay
from server_helpers import replay_app

pytest.importorskip("schemathesis")

# schemathesis counts these as "the server rejected the negative case": its defaults, and 413, which is how a
# body larger than the server takes is refused (before it is read, so no schema could be checked first).
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]
"""


def test_schemathesis_finds_no_failure(tmp_path: Path) -> None:
    st = shutil.which("st", path=str(Path(sys.executable).parent))
    assert st is not None, "schemathesis's `st` command is missing from the venv"
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    app, _ = replay_app("fine 🦙", rate=None, api_key="k", max_tokens_limit=16, max_body_bytes=1 << 20)
    with serve_relay(app) as url:
        run = subprocess.run(
            [
                st,
                "--config-file",
                str(config),
                "run",
                url + "/openapi.json",
                "--checks",
                "all",
                "--header",
                "Authorization: Bearer k",
                "--max-examples",
                "30",
                "--seed",
                "12",
                "--workers",
                "1",
                "--request-timeout",
                "20",
                "--output-truncate",
                "true",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
            # Rules that relate one field to another, which the schema cannot state (tool names, tool turns).
            env={**os.environ, "SCHEMATHESIS_HOOKS": str(Path(__file__).parent / "schemathesis_hooks.py")},
        )
    summary = run.stdout[-6000:]
    assert run.returncode == 0, summary + run.stderr[-2000:]
    assert "No issues found" in run.stdout or "passed" in run.stdout, summary
    assert "10/10" in run.stdout  # every documented operation was tested (Responses: 3, Messages: 2)
