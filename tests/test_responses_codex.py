"""Issue 29 §2: Codex CLI (``@openai/codex``, its binary from npm) answers a one-line prompt through
``tokenrelay serve`` on the Responses API.

On the replay engine: Codex's prompt is ~6,400 tokens of instructions and tool definitions (which SmolLM2's
context could hold only with a larger ``--n-ctx``, and at minutes per turn on two cores), and the point here is
the wire: Codex's request is taken (its ``web_search``/``custom``/``namespace`` tools left out, not refused), and
its reader accepts the stream and prints the answer.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from server_helpers import serve_process

ROOT = Path(__file__).resolve().parents[1]
CODEX = ROOT / "node_modules" / ".bin" / "codex"
ANSWER = "Hello from tokenrelay, one line."


def test_codex_exec_answers_a_one_line_prompt(tmp_path: Path) -> None:
    if not CODEX.exists():
        pytest.skip("the npm devDependencies (npm ci) are needed for Codex CLI")
    text = tmp_path / "reply.txt"
    text.write_text(ANSWER)
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    with serve_process("--engine", "replay", "--text-file", str(text), "--rate", "1000") as server:
        provider = f'{{name="tokenrelay", base_url="{server.url}/v1", wire_api="responses"}}'
        run = subprocess.run(
            [
                str(CODEX),
                "exec",
                "--skip-git-repo-check",
                "-c",
                "model_provider=tokenrelay",
                "-c",
                f"model_providers.tokenrelay={provider}",
                "-m",
                "replay",
                "Say hello in one line.",
            ],
            cwd=work,
            env={**os.environ, "CODEX_HOME": str(home)},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
        )
        log = server.output()
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-2000:]
    assert run.stdout.strip().splitlines()[-1] == ANSWER  # codex exec prints the final message last
    assert "/v1/responses resp_" in log and "finish=stop" in log
