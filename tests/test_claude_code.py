"""Issue 30 §2: Claude Code (``@anthropic-ai/claude-code``, npm) answers through ``tokenrelay serve``.

``claude -p`` with ``ANTHROPIC_BASE_URL`` at the server prints the reply and exits 0. Its request is long (a
~75 KB system prompt, two dozen tools, ``max_tokens`` 32000), so the server is the replay engine over SmolLM2's
tokenizer, which replies with a known text whatever the prompt. What Claude Code 2.1 sends, as captured: one
streamed ``POST /v1/messages?beta=true`` (``anthropic-version``, ``anthropic-beta`` with several betas,
``x-api-key``; ``thinking: {"type": "adaptive"}``, ``context_management``, ``output_config.effort``,
``metadata.user_id``, a ``system`` message inside ``messages``, all tools custom ones with ``input_schema``),
and sometimes ``HEAD /``; no ``count_tokens`` and no model listing in ``-p`` mode. It names its own models
unless ``ANTHROPIC_MODEL`` and ``ANTHROPIC_DEFAULT_HAIKU_MODEL`` say otherwise; the server answers to the
names it is given (``--served-model-name``). ``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` brings its ``max_tokens``
within the server's ``--max-tokens-limit``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from _uvicorn import serve_relay
from server_helpers import replay_app

ROOT = Path(__file__).resolve().parents[1]
CLAUDE = ROOT / "node_modules" / ".bin" / "claude"
REPLY = "Hello from the relay: 🦙 नमस्ते, done."


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    app, _ = replay_app(REPLY, rate=500.0, api_key="sk-relay", model_aliases=("house-model", "house-small"))
    with serve_relay(app) as url:
        yield url


def claude(url: str, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    if not CLAUDE.exists():
        pytest.skip("Claude Code is an npm devDependency (npm ci)")
    home.mkdir(exist_ok=True)
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "sk-relay",
        "ANTHROPIC_MODEL": "house-model",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "house-small",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "1024",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        **env,
    }
    return subprocess.run(
        [str(CLAUDE), *args], env=environment, cwd=home, capture_output=True, text=True, timeout=240
    )


def test_claude_code_prints_the_reply_and_exits_0(server: str, tmp_path: Path) -> None:
    run = claude(server, tmp_path / "home", "-p", "Say hello")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == REPLY
