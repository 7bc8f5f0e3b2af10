"""``tokenrelay chat`` typed into on a real pseudo-terminal, against a running server and embedded engines."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from _terminal import Terminal, cli_env, tokenrelay
from _uvicorn import serve
from server_helpers import replay_app


def test_a_conversation_keeps_its_history_through_a_server() -> None:
    app, _ = replay_app(None, rate=None)  # replays what it was sent: the reply shows the whole history
    with serve(app) as url, Terminal("chat", "--url", url, "--system", "be kind") as term:
        term.expect(r"tokenrelay chat · replay at http://127\.0\.0\.1:\d+/v1 · /help")
        term.expect(">>> ")
        term.line("first ☕")
        reply = term.expect(">>> ")
        assert reply == "first ☕\r\nsystem: be kind\r\nuser: first ☕\r\n\r\n\r\n"  # echo, reply, blank line
        term.line("second")
        reply = term.expect(">>> ")
        assert "user: first ☕\r\nassistant: system: be kind\r\nuser: first ☕\r\n\r\nuser: second" in reply
        term.line("/clear")
        assert "(conversation cleared)" in term.expect(">>> ")
        term.line("/system")
        assert "(system prompt removed)" in term.expect(">>> ")
        term.line("third")
        assert term.expect(">>> ") == "third\r\nuser: third\r\n\r\n\r\n"
        term.line("/exit")
        assert term.wait() == 0


def test_commands_multiline_ctrl_c_and_ctrl_d_with_the_embedded_replay_engine(tmp_path: Path) -> None:
    text = tmp_path / "long.txt"
    text.write_text("word " * 3000)
    args = ["chat", "--engine", "replay", "--rate", "50", "--max-tokens", "5000"]
    with Terminal(*args, "--text-file", str(text)) as term:
        term.expect(r"replay \(embedded\)")
        term.expect(">>> ")
        term.line("/help")
        shown = term.expect(">>> ")
        for command in ("/clear", "/system TEXT", "/history", "/exit", '"""'):
            assert command in shown
        term.line("go")
        term.expect("word word")
        term.ctrl_c()  # stops the reply, keeps the session
        shown = term.expect(">>> ")
        assert "(interrupted)" in shown and "Traceback" not in shown
        term.line("/history")
        history = term.expect(">>> ")
        assert history.count("user: go") == 1 and "assistant: word word" in history  # the part shown stays
        term.ctrl_c()  # at the prompt: a hint, not an exit
        term.expect(r"\(Ctrl-D or /exit to quit\)")
        term.expect(">>> ")
        term.line('"""one')
        term.line('two"""')
        term.expect("word")  # a multi-line message was sent
        term.ctrl_c()
        term.expect(">>> ")
        term.line("/history")
        assert "user: one\r\ntwo" in term.expect(">>> ")
        term.ctrl_d()
        assert term.wait() == 0
    assert term.seen.endswith(b">>> \r\n")  # Ctrl-D ends the line: the shell prompt starts clean


#: ``select()`` that starts waiting 0.1 s late, as in a process preempted between writing the prompt and
#: waiting for a key (a busy machine): a SIGINT in that gap finds no ``select()`` to interrupt.
_LATE_SELECT = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/select.h>
#include <time.h>
int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t) {
    static int (*real)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
    struct timespec gap = {0, 100 * 1000 * 1000};
    if (!real) real = dlsym(RTLD_NEXT, "select");
    while (nanosleep(&gap, &gap) != 0) {}
    return real(n, r, w, e, t);
}
"""


def test_ctrl_c_at_the_prompt_is_seen_even_when_it_comes_before_readline_waits(tmp_path: Path) -> None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the late select() shim")
    (tmp_path / "late_select.c").write_text(_LATE_SELECT)
    shim = tmp_path / "late_select.so"
    build = [compiler, "-shared", "-fPIC", "-o", str(shim), str(tmp_path / "late_select.c"), "-ldl"]
    subprocess.run(build, check=True, capture_output=True, timeout=60)
    with Terminal("chat", "--engine", "replay", env=cli_env(LD_PRELOAD=str(shim))) as term:
        term.expect(">>> ")
        for _ in range(3):  # each Ctrl-C lands in the gap: readline has not started waiting yet
            term.ctrl_c()
            term.expect(r"\(Ctrl-D or /exit to quit\)", timeout=10)
            term.expect(">>> ")
        term.line("/exit")
        assert term.wait() == 0


def test_piped_stdin_answers_line_by_line_and_stops_on_an_error() -> None:
    app, _ = replay_app(None, rate=None, api_key="k")
    with serve(app) as url:
        ok = tokenrelay("chat", "--url", url, "--api-key", "k", input=b"one\n\n/clear\ntwo\n")
        bad = tokenrelay("chat", "--url", url, input=b"one\n")
    assert ok.returncode == 0 and ok.stdout.decode() == "user: one\n\nuser: two\n\n"
    assert ok.stderr.decode() == "(conversation cleared)\n"
    assert bad.returncode == 2 and bad.stdout == b""
    assert bad.stderr.decode().strip() == (
        "tokenrelay chat: error: invalid or missing API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')"
    )


def test_chat_with_the_real_smollm2_model_sends_the_history() -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    from tokenrelay.engines.llamacpp import resolve_model_path

    turns = ["What is 2+2?", "And 3+3?"]
    proc = tokenrelay(
        "chat", "--temperature", "0", "--max-tokens", "12", "--threads", "2",
        input="\n".join(turns).encode() + b"\n", timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    llama = llama_cpp.Llama(
        model_path=str(resolve_model_path("smollm2")), n_ctx=2048, flash_attn=True, verbose=False
    )
    try:
        messages: list[dict[str, str]] = []
        expected = ""
        for turn in turns:
            messages.append({"role": "user", "content": turn})
            # The engine evaluates each prompt whole; without reset() llama-cpp-python would reuse the
            # cached prefix, which changes the float sums enough to flip a near-tie ("9." instead of "5.").
            llama.reset()
            ref = llama.create_chat_completion(
                messages=messages,
                temperature=0.0,
                max_tokens=12,
                top_k=0,
                min_p=0.0,
                repeat_penalty=1.0,
            )
            content = ref["choices"][0]["message"]["content"]
            messages.append({"role": "assistant", "content": content})
            expected += content + "\n"
    finally:
        llama.close()
    assert proc.stdout.decode("utf-8") == expected
