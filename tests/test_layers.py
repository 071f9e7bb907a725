"""The modules behind the facade import only downward (docs/format.md §15).

``CheckpointManager`` (snapstore/api.py) is a thin facade over layer-4 modules, each holding one
concept. This test reads every ``snapstore`` module's imports (top-level and function-local, from
the source: nothing is executed) and checks them against the order in :data:`LAYER4`: a module
may import the modules before it, never one after it, and nothing below layer 4 imports any of
them. It fails if a change makes an import go upward or sideways into a later module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "snapstore"

LAYER4 = ["callers", "checkpoint", "logscan", "views", "publish", "records", "retention", "saving", "reading",
          "runread", "forking", "api"]
"""Layer 4 bottom to top: each may import only the ones before it."""

BELOW = ["repository", "readpath", "writepath", "logrecords", "compaction", "runlog", "logstubs", "forwarding", "check", "repack", "gc"]
"""Layers 1-3 (``stores`` and ``format`` are packages, checked too): they import nothing in :data:`LAYER4`."""


def _snapstore_imports(path: Path) -> set[str]:
    """The top-level ``snapstore`` modules ``path`` imports (``from . import x``, ``from .x import y``,
    ``from ..x import y`` in a subpackage, ``import snapstore.x``), anywhere in the file."""
    tree = ast.parse(path.read_text(), str(path))
    depth = len(path.relative_to(PKG).parts) - 1  # 0: snapstore/x.py, 1: snapstore/sub/x.py
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == depth + 1:  # relative to the snapstore package
                if node.module:
                    out.add(node.module.split(".")[0])
                else:
                    out.update(a.name for a in node.names)
            elif node.level == 0 and node.module and node.module.split(".")[0] == "snapstore":
                parts = node.module.split(".")
                if len(parts) > 1:
                    out.add(parts[1])
                else:
                    out.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "snapstore" and len(parts) > 1:
                    out.add(parts[1])
    return out


def test_every_layer4_module_exists():
    for name in LAYER4 + BELOW:
        assert (PKG / f"{name}.py").is_file(), name


@pytest.mark.parametrize("name", LAYER4)
def test_layer4_imports_only_downward(name):
    later = set(LAYER4[LAYER4.index(name) + 1:])
    bad = _snapstore_imports(PKG / f"{name}.py") & later
    assert not bad, f"snapstore/{name}.py imports {sorted(bad)}, which sit above it in layer 4"


def test_lower_layers_import_nothing_of_layer4():
    files = [PKG / f"{n}.py" for n in BELOW] + sorted((PKG / "format").glob("*.py")) + \
        sorted((PKG / "stores").glob("*.py"))
    for f in files:
        bad = _snapstore_imports(f) & set(LAYER4)
        assert not bad, f"{f.relative_to(PKG.parent)} imports {sorted(bad)} of layer 4"


def test_the_checker_sees_imports(tmp_path):
    """The import reader finds each form of import (so the checks above can fail)."""
    f = PKG / "saving.py"
    got = _snapstore_imports(f)
    assert {"views", "publish", "retention", "errors", "format"} <= got
    assert "records" in _snapstore_imports(PKG / "retention.py")
    assert {"stores", "format"} <= _snapstore_imports(PKG / "repository.py") | _snapstore_imports(PKG / "readpath.py")
