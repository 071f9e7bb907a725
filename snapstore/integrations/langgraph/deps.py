"""The LangGraph and LangChain names the saver uses, imported once (``snapstore[langgraph]``).

Every other module of this package takes them from here, so a missing extra is one typed error
on import: :class:`snapstore.errors.MissingDependencyError` naming ``snapstore[langgraph]``.
"""

from __future__ import annotations

from ...errors import MissingDependencyError

try:
    from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (WRITES_IDX_MAP, BaseCheckpointSaver, ChannelVersions, Checkpoint,
                                           CheckpointMetadata, CheckpointTuple, DeltaChannelHistory, PendingWrite,
                                           get_checkpoint_id, get_checkpoint_metadata, writes_sort_key)
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.types import _DeltaSnapshot
except ImportError as e:  # pragma: no cover - exercised in a subprocess test
    raise MissingDependencyError(
        f"snapstore.integrations.langgraph needs langgraph-checkpoint and langchain-core "
        f"({e.name or e} is not installed): pip install 'snapstore[langgraph]'") from e

DeltaSnapshot = _DeltaSnapshot
"""LangGraph's DeltaChannel snapshot value (``langgraph.checkpoint.serde.types._DeltaSnapshot``)."""

__all__ = ["BaseMessage", "message_to_dict", "messages_from_dict", "RunnableConfig", "WRITES_IDX_MAP",
           "BaseCheckpointSaver", "ChannelVersions", "Checkpoint", "CheckpointMetadata", "CheckpointTuple",
           "DeltaChannelHistory", "PendingWrite", "get_checkpoint_id", "get_checkpoint_metadata",
           "writes_sort_key", "SerializerProtocol", "DeltaSnapshot"]
