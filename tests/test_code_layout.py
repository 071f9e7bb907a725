"""docs/code-layout.md draws the package: every package folder and every module under snapstore/
is named in its tree, and everything the tree names exists (a module moved or added without the
page fails here)."""

from __future__ import annotations

import re

from tests.helpers.paths import ROOT

PAGE = ROOT / "docs" / "code-layout.md"
PKG = ROOT / "snapstore"


def drawn_paths() -> set[str]:
    """The paths the page's tree names, relative to the project root (folders end with ``/``)."""
    text = PAGE.read_text()
    block = re.search(r"```\n(snapstore/\n.*?)```", text, re.S)
    assert block, "docs/code-layout.md has no tree starting with snapstore/"
    stack: list[tuple[int, str]] = []
    out = set()
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        name = line.split()[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (stack[-1][1] if stack else "") + name
        out.add(path)
        if name.endswith("/"):
            stack.append((indent, path))
    return out


def actual_paths() -> set[str]:
    out = set()
    for p in PKG.rglob("*"):
        rel = p.relative_to(ROOT).as_posix()
        if "__pycache__" in rel:
            continue
        if p.is_dir():
            out.add(rel + "/")
        elif p.suffix == ".py" and (p.name != "__init__.py" or p.parent == PKG):
            out.add(rel)
    out.add("snapstore/")
    return out


def test_every_package_and_module_is_on_the_page():
    drawn, actual = drawn_paths(), actual_paths()
    # files under a folder drawn as a leaf (server/page/: static files) need not be listed
    leaves = {d for d in drawn if d.endswith("/") and not any(x != d and x.startswith(d) for x in drawn)}
    actual = {a for a in actual if not any(a != leaf and a.startswith(leaf) for leaf in leaves)}
    assert not actual - drawn, f"missing from docs/code-layout.md: {sorted(actual - drawn)}"
    assert not drawn - actual, f"named in docs/code-layout.md but not in snapstore/: {sorted(drawn - actual)}"


def test_the_page_parser_sees_a_missing_module(tmp_path):
    """The check can fail: a tree without one module is caught."""
    drawn = drawn_paths()
    assert "snapstore/manager/save.py" in drawn and "snapstore/repo/log/" in drawn
    assert "snapstore/repo/log/records.py" in drawn  # nested folders resolve
    assert "snapstore/manager/nonexistent.py" not in drawn
