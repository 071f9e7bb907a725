"""Framework integrations (layer 5: surfaces). Each lives in its own module and needs an extra.

* :class:`SnapstoreSaver` (:mod:`snapstore.integrations.langgraph`): a LangGraph checkpointer;
  extra ``snapstore[langgraph]``. :class:`SafeSerializer` (:mod:`snapstore.integrations.serde`):
  its optional exact serializer without module paths in stored data (docs/langgraph-serde.md).
* :class:`SnapstoreSession` (:mod:`snapstore.integrations.openai_agents`): an OpenAI Agents SDK
  session; extra ``snapstore[openai]``.
* :class:`ResumableWorkflow` and :class:`CheckpointedLoop` (:mod:`snapstore.integrations.workflows`):
  workflow helpers: resumable steps and a checkpointed tool loop; no extra.

This package imports without any framework installed; using an integration whose framework is
missing raises :class:`snapstore.errors.MissingDependencyError` naming the extra to install.
"""

from __future__ import annotations

__all__ = ["SnapstoreSaver", "SafeSerializer", "SnapstoreSession", "ResumableWorkflow", "CheckpointedLoop"]

_LAZY = {"SnapstoreSaver": "langgraph", "SafeSerializer": "serde", "SnapstoreSession": "openai_agents", "ResumableWorkflow": "workflows",
         "CheckpointedLoop": "workflows"}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
