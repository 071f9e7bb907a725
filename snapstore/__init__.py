"""snapstore: content-addressed, deduplicated, compressed storage for AI-agent checkpoints.

Quick start::

    from snapstore import CheckpointManager
    mgr = CheckpointManager("path/to/dir")          # or "s3://bucket/prefix"
    cid = mgr.save("run-1", messages, step=3, token_usage={"input": 1200, "output": 80})
    cp = mgr.latest("run-1")                         # Checkpoint(messages=[...], ...)
"""

from .manager.facade import EMPTY_RUN, Checkpoint, CheckpointManager, CheckpointSummary
from .errors import CheckpointNotFound, ConflictError, SnapstoreError

__version__ = "0.1.0"

__all__ = ["CheckpointManager", "Checkpoint", "CheckpointSummary", "EMPTY_RUN", "SnapstoreError", "ConflictError",
           "CheckpointNotFound", "__version__"]
