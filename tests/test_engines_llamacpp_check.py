"""The load-time check that this machine can run the llama.cpp build (issue 10: SIGILL on an AMX-reporting VM)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")

from tokenrelay._errors import ConfigError
from tokenrelay.engines import llamacpp_check as check
from tokenrelay.engines.llamacpp import resolve_model_path
from tokenrelay.engines.llamacpp_check import ProbeFailed, ProbeSettings

SMOLLM2 = resolve_model_path("smollm2")


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def settings(**changes: object) -> ProbeSettings:
    base = {"model_path": str(SMOLLM2), "n_threads": check.default_threads(), "n_parallel": 2}
    base.update(changes)
    base.setdefault("use_extra_bufts", True)
    return ProbeSettings(**base)  # type: ignore[arg-type]


def test_the_installed_build_is_portable() -> None:
    """`make install` builds llama.cpp without native flags: nothing past x86-64-v3 may be compiled in, or a
    machine whose CPU reports (but cannot run) AVX-512 or AMX dies with SIGILL again."""
    features = check.compiled_features()
    if not features:
        pytest.skip("llama_print_system_info reports no CPU features on this platform")
    enabled = {name for name, on in features.items() if on}
    assert not {name for name in enabled if name.startswith(("AVX512", "AMX"))}, enabled
    if "AVX2" in features:  # x86: the baseline `make install` asks for is really there
        assert {"AVX", "AVX2", "FMA", "F16C"} <= enabled, enabled


def test_features_the_cpu_lacks_are_named() -> None:
    built = {"AVX": True, "AVX2": True, "AVX512": False, "AMX_INT8": True}
    missing = check.missing_cpu_features(built, {"avx", "avx2", "fma"})
    if not missing and not check.missing_cpu_features({"AVX2": True}, {"sse2"}):
        pytest.skip("not an x86-64 machine")
    assert missing == ["AMX_INT8"]
    assert check.missing_cpu_features(built, {"avx", "avx2", "amx_int8"}) == []


def test_the_real_model_decodes_a_multi_token_prompt_in_the_servers_thread_layout(fresh_cache: Path) -> None:
    # The child loads SmolLM2 with the engine's own thread count and sequences and decodes a multi-token prompt
    # plus batched steps; a build this CPU cannot run would kill it with a signal, which fails this test
    # instead of the test run.
    check.probe(settings())
    assert (fresh_cache / "tokenrelay" / "llamacpp-probes.json").is_file()


def test_a_passed_probe_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    check.probe(settings(n_parallel=1))

    def no_child(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached answer should have been used")

    monkeypatch.setattr(subprocess, "run", no_child)
    check.probe(settings(n_parallel=1))
    with pytest.raises(AssertionError):
        check.probe(settings(n_parallel=1, n_threads=check.default_threads() + 1))


def test_a_child_killed_by_sigill_is_reported_by_name() -> None:
    die = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]
    with pytest.raises(ProbeFailed) as info:
        check.probe(settings(), command=die)
    assert info.value.signal_number == signal.SIGILL
    assert "SIGILL" in info.value.reason


def test_a_child_that_fails_is_reported_with_its_last_line() -> None:
    fail = [sys.executable, "-c", "import sys; sys.exit('no such backend')"]
    with pytest.raises(ProbeFailed, match="no such backend") as info:
        check.probe(settings(), command=fail)
    assert info.value.signal_number is None


def test_sigill_falls_back_to_no_extra_buffer_types(monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[bool] = []

    def fake_probe(s: ProbeSettings) -> None:
        tried.append(s.use_extra_bufts)
        if s.use_extra_bufts:
            raise ProbeFailed("killed by SIGILL", signal_number=signal.SIGILL)

    monkeypatch.setattr(check, "probe", fake_probe)
    lines: list[str] = []
    assert check.check_runnable(SMOLLM2, n_threads=2, n_parallel=1, on_progress=lines.append) is False
    assert tried == [True, False]
    assert any("without extra buffer types" in line for line in lines)


def test_a_model_that_cannot_run_is_one_clear_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def always_dies(s: ProbeSettings) -> None:
        raise ProbeFailed("llama.cpp was killed by SIGILL while decoding a test prompt", signal_number=4)

    monkeypatch.setattr(check, "probe", always_dies)
    with pytest.raises(ConfigError, match=r"SIGILL.*GGML_NATIVE=OFF"):
        check.check_runnable(SMOLLM2, n_threads=2, n_parallel=1)
