"""Prove at load time that this machine can run the llama.cpp build, before any request is served.

Issue 10: a llama.cpp compiled for the build machine (``-march=native``, AMX weight repacking) was run on a VM
whose CPU *reports* AMX but cannot execute it. Loading worked; the first prompt longer than one token executed
``tilezero`` and the process died with SIGILL, so ``tokenrelay serve`` printed "serving on …" and then vanished
on the first chat request. An illegal instruction cannot be caught inside the process that executes it, so the
check runs in a child process:

1. :func:`missing_cpu_features` compares the features llama.cpp was compiled with (``llama_print_system_info``)
   with the CPU flags the kernel reports; a build that needs AVX2 on a CPU without it is refused at once.
2. :func:`probe` starts ``python -m tokenrelay.engines.llamacpp_check`` which loads the model with the same
   parameters and thread count the server will use and decodes a multi-token prompt (a prompt of one token takes
   a different matrix path and would prove nothing) plus a few batched single-token steps. A child killed by a
   signal is reported as one clear error naming the signal and the fix.

The answer is cached per (llama.cpp library, model file, CPU flags, parameters), so a server restart on the same
machine pays nothing; a different CPU or a rebuilt library probes again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tokenrelay._errors import ConfigError

__all__ = [
    "ProbeFailed",
    "ProbeSettings",
    "check_runnable",
    "compiled_features",
    "default_threads",
    "missing_cpu_features",
    "probe",
]

# llama.cpp's system-info names for the x86 features it may be compiled with → the /proc/cpuinfo flag each needs.
_X86_FLAGS = {
    "SSE3": "pni",
    "SSSE3": "ssse3",
    "AVX": "avx",
    "AVX2": "avx2",
    "F16C": "f16c",
    "FMA": "fma",
    "BMI2": "bmi2",
    "AVX_VNNI": "avx_vnni",
    "AVX512": "avx512f",
    "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16",
    "AMX_INT8": "amx_int8",
}
REBUILD_HINT = (
    "rebuild llama-cpp-python for a portable CPU target: CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_AVX2=ON "
    "-DGGML_FMA=ON -DGGML_F16C=ON' pip install --force-reinstall --no-cache-dir llama-cpp-python "
    "(`make install` does this)"
)


class ProbeFailed(Exception):
    """The child could not decode: ``reason`` says how it died, ``fatal`` whether it was a signal."""

    def __init__(self, reason: str, *, signal_number: int | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.signal_number = signal_number


@dataclass(frozen=True)
class ProbeSettings:
    """What the child loads: the same values the engine passes to llama.cpp."""

    model_path: str
    n_threads: int
    n_parallel: int
    use_extra_bufts: bool


def compiled_features() -> dict[str, bool]:
    """``{"AVX2": True, "AMX_INT8": False, …}`` from ``llama_print_system_info`` (CPU backend line)."""
    import llama_cpp

    info = bytes(llama_cpp.llama_print_system_info()).decode("utf-8", "replace")
    features: dict[str, bool] = {}
    for part in info.replace("|", "\n").splitlines():
        name, sep, value = part.partition("=")
        name = name.strip().rsplit(":", 1)[-1].strip()
        if sep and name and value.strip() in {"0", "1"}:
            features[name] = value.strip() == "1"
    return features


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def missing_cpu_features(features: dict[str, bool] | None = None, flags: set[str] | None = None) -> list[str]:
    """Features llama.cpp was built with that this x86 CPU does not report (``[]`` elsewhere or when unknown)."""
    if platform.machine().lower() not in {"x86_64", "amd64"}:
        return []
    flags = _cpu_flags() if flags is None else flags
    if not flags:
        return []
    features = compiled_features() if features is None else features
    return [
        name for name, on in features.items() if on and name in _X86_FLAGS and _X86_FLAGS[name] not in flags
    ]


def _library_identity() -> str:
    import llama_cpp

    parts = [getattr(llama_cpp, "__version__", "?")]
    folder = Path(llama_cpp.__file__).parent / "lib"
    for lib in sorted(folder.glob("*.so*")) if folder.is_dir() else []:
        stat = lib.stat()
        parts.append(f"{lib.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return "|".join(parts)


def _cache_key(settings: ProbeSettings) -> str:
    model = Path(settings.model_path)
    stat = model.stat()
    cpu = sorted(_cpu_flags())
    material = json.dumps(
        [asdict(settings), stat.st_size, stat.st_mtime_ns, _library_identity(), cpu, platform.machine()]
    )
    return hashlib.sha256(material.encode()).hexdigest()


def _cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "tokenrelay" / "llamacpp-probes.json"


def _cached(key: str) -> bool:
    try:
        return bool(json.loads(_cache_file().read_text()).get(key))
    except (OSError, ValueError, AttributeError):
        return False


def _remember(key: str) -> None:
    path = _cache_file()
    try:
        known = json.loads(path.read_text()) if path.is_file() else {}
        if not isinstance(known, dict):
            known = {}
        known[key] = True
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(known))
        tmp.replace(path)
    except (OSError, ValueError):
        pass  # a cache that cannot be written only costs the next start a probe


def probe(settings: ProbeSettings, *, command: Sequence[str] | None = None, timeout: float = 120.0) -> None:
    """Run the decode check in a child process; raise :class:`ProbeFailed` if it dies or fails.

    ``command`` replaces the child's command line (tests use it to show how a dying child is reported).
    """
    key = _cache_key(settings) if command is None else ""
    if key and _cached(key):
        return
    child = f"from {__name__} import main; main()"  # not `-m`: the package imports this module first
    argv = (
        list(command) if command is not None else [sys.executable, "-c", child, json.dumps(asdict(settings))]
    )
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ProbeFailed(f"the decode check did not finish in {timeout:.0f}s", signal_number=None) from exc
    if done.returncode < 0:
        number = -done.returncode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        raise ProbeFailed(
            f"llama.cpp was killed by {name} while decoding a test prompt", signal_number=number
        )
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        raise ProbeFailed(f"the decode check failed: {tail[0]}", signal_number=None)
    if key:
        _remember(key)


def default_threads() -> int:
    """The thread count the engine uses unless told otherwise: every core, at most 8."""
    return min(8, os.cpu_count() or 1)


def check_runnable(
    path: Path, *, n_threads: int, n_parallel: int, on_progress: Callable[[str], None] | None = None
) -> bool:
    """Raise ``ConfigError`` unless this machine can decode ``path``; return the ``use_extra_bufts`` to load
    with. A build that dies with SIGILL is tried once more without extra buffer types (AMX and other weight
    repacking), the run-time way around a CPU that reports instructions it cannot execute."""
    report = on_progress or (lambda _line: None)
    missing = missing_cpu_features()
    if missing:
        raise ConfigError(
            f"this llama.cpp build uses {', '.join(missing)}, which this CPU does not report; {REBUILD_HINT}"
        )
    settings = ProbeSettings(str(path), n_threads, n_parallel, use_extra_bufts=True)
    try:
        probe(settings)
        return True
    except ProbeFailed as exc:
        if exc.signal_number != signal.SIGILL:
            raise ConfigError(
                f"{path.name} cannot run on this machine: {exc.reason}; {REBUILD_HINT}"
            ) from exc
        first = exc
    report(f"{first.reason}; retrying without extra buffer types (AMX/weight repacking)…")
    try:
        probe(replace(settings, use_extra_bufts=False))
    except ProbeFailed as exc:
        raise ConfigError(
            f"{path.name} cannot run on this machine: {first.reason}, and again without extra buffer "
            f"types ({exc.reason}); {REBUILD_HINT}"
        ) from exc
    report("running without extra buffer types: this CPU reports instructions it cannot execute")
    return False


def _child(settings: ProbeSettings) -> None:
    """Load and decode exactly as the engine does (a multi-token prompt, then batched single-token steps)."""
    from tokenrelay.engines._llama_native import NativeModel

    model = NativeModel.load(
        Path(settings.model_path),
        n_threads=settings.n_threads,
        n_parallel=settings.n_parallel,
        n_ctx_seq=256,
        use_extra_bufts=settings.use_extra_bufts,
    )
    try:
        model.self_test()
    finally:
        model.close()


def main() -> None:
    """The child's entry point: ``sys.argv[1]`` is the JSON of a :class:`ProbeSettings`."""
    _child(ProbeSettings(**json.loads(sys.argv[1])))
