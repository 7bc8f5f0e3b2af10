"""``tokenrelay generate``: the whole pipeline to a terminal, in-process and as a real subprocess."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokenrelay import cli
from tokenrelay.tokenizers import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
CORPUS_PATH = ROOT / "tests" / "data" / "multilingual.txt"
CORPUS = CORPUS_PATH.read_bytes().decode("utf-8")  # bytes: keep the CRLF line ends
REPLAY = ["--engine", "replay", "--text-file", str(CORPUS_PATH), "--rate", "0", "--max-tokens", "100000"]


def run(capsysbinary: pytest.CaptureFixture[bytes], *argv: str) -> tuple[int, bytes, str]:
    status = cli.main(["generate", *argv])
    captured = capsysbinary.readouterr()
    return status, captured.out, captured.err.decode("utf-8")


def reference(text: str) -> str:
    tok = load_tokenizer("smollm2")
    return tok.decode(tok.encode(text))


def test_replay_streams_the_corpus_exactly(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    status, out, err = run(capsysbinary, "ignored prompt", *REPLAY)
    assert status == 0
    assert out.decode("utf-8") == reference(CORPUS) + "\n"
    for label in ("TTFT ", "inter-token p50 ", " p95 ", "total ", "finish: stop"):
        assert label in err


def test_stop_and_max_tokens(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    status, out, err = run(capsysbinary, "x", *REPLAY, "--stop", "世界", "--stop", "never")
    assert status == 0 and out.decode("utf-8") == CORPUS[: CORPUS.index("世界")] + "\n"
    assert "finish: stop" in err
    tok = load_tokenizer("smollm2")
    status, out, err = run(capsysbinary, "x", *REPLAY, "--max-tokens", "9")
    assert out.decode("utf-8") == tok.decode(tok.encode(CORPUS)[:9]) + "\n"
    assert "9 tokens" in err and "finish: length" in err


def test_json_lines(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    status, out, _ = run(capsysbinary, "x", *REPLAY, "--stop", "Emoji", "--json")
    *deltas, summary = [json.loads(line) for line in out.decode("utf-8").splitlines()]
    assert status == 0
    assert "".join(d["delta"] for d in deltas) == CORPUS[: CORPUS.index("Emoji")]
    assert all(d["delta"] and d["token_ids"] for d in deltas)
    assert summary["finish_reason"] == "stop" and summary["matched"] == "Emoji"
    usage = summary["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert summary["timings"]["ttft_s"] > 0 and summary["timings"]["total_s"] >= summary["timings"]["ttft_s"]


def test_prompt_from_stdin_is_replayed(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("piped ☕ prompt"))
    status, out, _ = run(capsysbinary, "-", "--engine", "replay", "--rate", "0")
    assert status == 0 and out.decode("utf-8") == "piped ☕ prompt\n"


def test_errors_are_one_line_and_status_2(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    status, out, err = run(capsysbinary, "hi", "--model", "/nonexistent/model.gguf")
    assert status == 2 and out == b""
    assert err.strip() == "tokenrelay generate: error: model file not found: /nonexistent/model.gguf"
    status, _, err = run(capsysbinary, "hi", "--engine", "replay", "--max-tokens", "0")
    assert status == 2 and "max_tokens" in err and "Traceback" not in err


def test_commands_are_a_table(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--name")

    def run_hello(args: argparse.Namespace) -> int:
        seen.append(args.name)
        return 7

    monkeypatch.setattr(
        cli, "COMMANDS", [*cli.COMMANDS, cli.Command("hello", "say hello", configure, run_hello)]
    )
    assert cli.main(["hello", "--name", "relay"]) == 7
    assert seen == ["relay"]


def test_llamacpp_generate_matches_llama_cpp_python(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    from tokenrelay.engines.llamacpp import resolve_model_path

    status, out, err = run(capsysbinary, "What is 2+2?", "--max-tokens", "16", "--temperature", "0")
    assert status == 0
    assert "loading model SmolLM2-135M-Instruct.Q4_1.gguf (" in err and "loaded SmolLM2" in err
    llama = llama_cpp.Llama(
        model_path=str(resolve_model_path("smollm2")), n_ctx=512, flash_attn=True, verbose=False
    )
    try:
        ref = llama.create_chat_completion(
            messages=[{"role": "user", "content": "What is 2+2?"}],
            temperature=0.0,
            max_tokens=16,
            top_k=0,
            min_p=0.0,
            repeat_penalty=1.0,
        )
    finally:
        llama.close()
    assert out.decode("utf-8") == ref["choices"][0]["message"]["content"] + "\n"


def test_subprocess_writes_utf8_under_the_c_locale() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "PYTHONIOENCODING", "PYTHONUTF8"))}
    env.update(LANG="C", LC_ALL="C", PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "tokenrelay", "generate", "x", *REPLAY]
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    assert proc.stdout.decode("utf-8") == reference(CORPUS) + "\n"
    assert b"TTFT" in proc.stderr
    help_text = subprocess.run(
        [sys.executable, "-m", "tokenrelay", "--help"], env=env, capture_output=True, timeout=60, check=True
    ).stdout
    assert b"generate" in help_text
