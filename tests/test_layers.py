"""The package's folders are layers and import only downward (docs/code-layout.md).

Each ``snapstore`` sub-package is one layer; :data:`LAYERS` lists them bottom to top. This test
reads every module's imports (top-level and function-local, from the source: nothing is executed)
and checks that a module imports only from its own layer or the ones below it. Inside
``manager/``, whose modules each hold one operation, :data:`MANAGER` gives the order too: a
module imports only the ones before it. It fails if a change makes an import go upward.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "snapstore"

LAYERS = [
    {"errors", "format"},      # typed errors; pure encodings (bytes in, values out)
    {"stores"},                # the ObjectStore protocol and its stores
    {"repo"},                  # the repository engine: packs, the read path, save preparation, the run log
    {"maintenance"},           # whole-repository operations: GC, mark, verify, stats, repack
    {"manager"},               # CheckpointManager and its operations
    {"importers", "integrations"},  # trajectory importers; LangGraph, OpenAI Agents, workflows
    {"server"},                # the REST service and its page
    {"cli"},                   # the command line
]
"""Bottom to top: a module may import from its own layer and the ones below, never above."""

MANAGER = ["callers", "replay", "checkpoint", "history", "summaries", "views", "runcache", "state", "firstread", "publish",
           "rollback", "undeclared_needs",
           "retention", "save", "read", "runread", "fork", "outcomes", "facade"]
"""``manager/`` bottom to top: each module may import only the ones before it."""

INTEGRATIONS_LANGGRAPH = ["deps", "gcpause", "ids", "values", "layout", "state", "registry", "save", "needs", "writes",
                          "sidewrites", "history", "checkpoints", "reads", "threads", "aio", "saver"]
"""``integrations/langgraph/`` bottom to top (its ``__init__`` states the order): each module may
import only the ones before it; ``__init__`` re-exports the public names."""

TOP = {"__init__", "__main__"}
"""Top-level modules besides ``errors``: the public names and ``python -m snapstore``."""


def _rank(part: str) -> int:
    for i, layer in enumerate(LAYERS):
        if part in layer:
            return i
    raise AssertionError(f"snapstore/{part} is in no layer of LAYERS")


def _imports(path: Path) -> set[tuple[str, ...]]:
    """Every ``snapstore`` module path ``path`` imports, as a tuple of parts below ``snapstore``
    (``from ..repo import tiers`` in ``manager/save.py`` gives ``("repo", "tiers")``), anywhere
    in the file."""
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(PKG).with_suffix("").parts
    here = list(rel[:-1])  # the package this module sits in, below snapstore
    out: set[tuple[str, ...]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)] if node.level > 1 else list(here)
            elif node.module and node.module.split(".")[0] == "snapstore":
                base = []
                mod = node.module.split(".")[1:]
                base += mod
                if not mod:
                    out.update((a.name,) for a in node.names)
                    continue
                out.add(tuple(base))
                continue
            else:
                continue
            mod = node.module.split(".") if node.module else []
            if mod:
                out.add(tuple(base + mod))
            else:
                out.update(tuple(base + [a.name]) for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "snapstore" and len(parts) > 1:
                    out.add(tuple(parts[1:]))
    return out


def _modules():
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_folder_is_a_layer():
    folders = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    top = {p.stem for p in PKG.glob("*.py")}
    assert folders | (top - TOP) == set().union(*LAYERS), "LAYERS must name every folder of snapstore/"
    for name in MANAGER:
        assert (PKG / "manager" / f"{name}.py").is_file(), name


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_imports_go_only_downward(path):
    rel = path.relative_to(PKG).with_suffix("").parts
    if len(rel) == 1 and rel[0] in TOP:
        return
    mine = _rank(rel[0] if len(rel) > 1 else rel[0])
    for imp in _imports(path):
        if imp[0] in TOP or imp[0] == "__version__":
            continue
        assert _rank(imp[0]) <= mine, f"snapstore/{'/'.join(rel)}.py imports snapstore.{'.'.join(imp)}, a layer above it"


@pytest.mark.parametrize("name", MANAGER)
def test_manager_modules_import_only_earlier_ones(name):
    later = set(MANAGER[MANAGER.index(name) + 1:])
    got = {imp[1] for imp in _imports(PKG / "manager" / f"{name}.py") if imp[0] == "manager" and len(imp) > 1}
    bad = got & later
    assert not bad, f"snapstore/manager/{name}.py imports {sorted(bad)}, which sit above it in manager/"


def _package_order(folder: tuple[str, ...], order: list[str], name: str) -> set[str]:
    """The modules of ``snapstore/<folder>/`` that module ``name`` imports and that sit after it
    in ``order``."""
    later = set(order[order.index(name) + 1:])
    n = len(folder)
    got = {imp[n] for imp in _imports(PKG.joinpath(*folder, f"{name}.py")) if imp[:n] == folder and len(imp) > n}
    return got & later


def test_langgraph_order_names_every_module():
    folder = PKG / "integrations" / "langgraph"
    assert {p.stem for p in folder.glob("*.py")} - {"__init__"} == set(INTEGRATIONS_LANGGRAPH)


@pytest.mark.parametrize("name", INTEGRATIONS_LANGGRAPH)
def test_langgraph_modules_import_only_earlier_ones(name):
    bad = _package_order(("integrations", "langgraph"), INTEGRATIONS_LANGGRAPH, name)
    assert not bad, f"snapstore/integrations/langgraph/{name}.py imports {sorted(bad)}, which sit above it"


def test_the_package_order_check_can_fail():
    """The saver imports the modules below it: with the order reversed, the check finds them."""
    assert _package_order(("integrations", "langgraph"), INTEGRATIONS_LANGGRAPH[::-1], "saver") >= {
        "reads", "threads", "aio", "state", "ids"}


def test_the_checker_sees_imports():
    """The import reader finds each form of import (so the checks above can fail)."""
    got = _imports(PKG / "manager" / "save.py")
    assert {("manager", "views"), ("manager", "publish"), ("manager", "retention"), ("errors",)} <= got
    assert any(i[0] == "format" for i in got) and any(i[0] == "repo" for i in got)
    assert ("manager", "rollback") in _imports(PKG / "manager" / "retention.py")
    assert any(i[0] == "stores" for i in _imports(PKG / "repo" / "repository.py"))
    with pytest.raises(AssertionError):
        _rank("nowhere")
