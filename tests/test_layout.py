"""The package's shape, read from its source: no import cycle, and a sans-I/O core that stays pure.

Both checks read imports with ``ast`` rather than importing anything, so they see imports inside functions
(where a lazy import hides a cycle or a clock) as well as those at the top of a module.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "tokenrelay"

# Standard-library modules the sans-I/O core may not import: clocks, sockets and the network, threads and
# processes, the event loop, logging, the file system. (``urllib.parse`` is pure string work; ``urllib`` as
# a whole is not listed, its I/O submodules are.)
IO_MODULES = frozenset(
    {
        "asyncio",
        "concurrent",
        "ctypes",
        "datetime",
        "http",
        "logging",
        "multiprocessing",
        "os",
        "pathlib",
        "select",
        "selectors",
        "shutil",
        "signal",
        "socket",
        "socketserver",
        "ssl",
        "subprocess",
        "tempfile",
        "threading",
        "time",
        "urllib.request",
        "urllib.response",
    }
)

# Underscore modules that are adapters all the same, and why.
NOT_CORE = {
    # The ctypes wrapper around llama.cpp's C API: the one place the embedded engine touches the native library.
    "tokenrelay.engines._llama_native",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
CORE = sorted(
    name
    for name in MODULES
    if name.rpartition(".")[2].startswith("_") and not name.endswith("__main__") and name not in NOT_CORE
)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(name: str, *, type_checking: bool = False) -> set[str]:
    """Every module ``name`` imports, anywhere in its body, as absolute dotted names; ``from X import y`` gives
    ``X.y`` when that is a module of the package, else ``X``. Imports under ``if TYPE_CHECKING:`` do not run,
    so they count only with ``type_checking=True`` (an import cycle is one even when only the type checker
    follows it: the two modules still cannot be understood, or moved, apart)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child) and not type_checking:
                for stmt in child.orelse:
                    visit_one(stmt)
            else:
                visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else base)
        else:
            visit(node)

    visit(ast.parse(path.read_text("utf-8")))
    found.discard("__future__")
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (as a path that returns to its start), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := walk(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for start in sorted(graph):
        if start not in state and (cycle := walk(start)) is not None:
            return cycle
    return None


def import_graph(*, type_checking: bool) -> dict[str, set[str]]:
    return {
        name: {m for m in imported_names(name, type_checking=type_checking) if m in MODULES and m != name}
        for name in MODULES
    }


def test_no_import_cycle_within_tokenrelay() -> None:
    """No cycle among the imports that run, nor among those only the type checker reads (issue 22)."""
    graph = import_graph(type_checking=True)
    assert sum(map(len, graph.values())) > 50  # the graph was really read
    assert find_cycle(graph) is None


def test_type_checking_imports_are_read() -> None:
    # The graph with them is larger than the one without: an ``if TYPE_CHECKING:`` block is really walked.
    with_them, without = import_graph(type_checking=True), import_graph(type_checking=False)
    assert all(without[name] <= with_them[name] for name in MODULES)
    assert "tokenrelay.engines.llamacpp" in with_them["tokenrelay.engines"] - without["tokenrelay.engines"]


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_core_is_every_underscore_module() -> None:
    expected = {
        "_detokenizer",
        "_errors",
        "_protocols",
        "_stops",
        "_stream",
        "_window",
        "wire._chat",
        "wire._sse",
    }
    assert {f"tokenrelay.{m}" for m in expected} <= set(CORE)
    assert {"tokenrelay.engines._batching", "tokenrelay.doctor._verdict"} <= set(CORE)


def test_the_wire_is_all_core() -> None:
    """``wire/`` holds each dialect's writer and reader and the SSE framing: every module in it is sans-I/O, and
    its package module imports nothing (importing one dialect never loads another)."""
    wire = [name for name in MODULES if name.startswith("tokenrelay.wire.")]
    assert wire and all(name in CORE for name in wire)
    assert imported_names("tokenrelay.wire", type_checking=True) == set()


@pytest.mark.parametrize("name", CORE)
def test_core_module_is_sans_io(name: str) -> None:
    """A core module imports the standard library minus I/O, and other core modules: never an adapter."""
    for imported in sorted(imported_names(name)):
        if imported.startswith("tokenrelay"):
            assert imported in CORE, f"{name} imports the adapter {imported}"
            continue
        top = imported.partition(".")[0]
        assert top in sys.stdlib_module_names, f"{name} imports {imported}, which is not the standard library"
        io = [m for m in IO_MODULES if imported == m or imported.startswith(m + ".")]
        assert not io, f"{name} imports {imported}: the sans-I/O core reads no clock and does no I/O"


# A module past this many lines says why in its docstring (issue 15: one concept per module, ~100-400 lines).
MAX_LINES = 420


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_long_module_says_why_it_is_long(name: str) -> None:
    source = MODULES[name].read_text("utf-8")
    lines = source.count("\n")
    if lines <= MAX_LINES:
        return
    docstring = ast.get_docstring(ast.parse(source)) or ""
    assert "lines" in docstring and "because" in docstring, (
        f"{name} has {lines} lines: split it along a seam, or say in its docstring why it is over 400 lines"
    )
