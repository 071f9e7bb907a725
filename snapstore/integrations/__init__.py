"""Framework integrations (layer 5: surfaces). Each lives in its own module and needs an extra.

* :class:`SnapstoreSaver` (:mod:`snapstore.integrations.langgraph`): a LangGraph checkpointer;
  extra ``snapstore[langgraph]``.

This package imports without any framework installed; using an integration whose framework is
missing raises :class:`snapstore.errors.MissingDependencyError` naming the extra to install.
"""

from __future__ import annotations

__all__ = ["SnapstoreSaver"]

_LAZY = {"SnapstoreSaver": "langgraph"}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
