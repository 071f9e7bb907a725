"""A LangGraph checkpointer on snapstore: :class:`SnapstoreSaver`.

Layer 5 (a surface over :class:`snapstore.manager.facade.CheckpointManager`); needs the extra
``snapstore[langgraph]`` (``langgraph-checkpoint`` 4.3 and ``langchain-core``).

Mapping (docs: README "LangGraph"; the persisted record layout, normative, is
``docs/langgraph-layout.md``; section numbers below are of that page):

* One snapstore **run** per ``(thread_id, checkpoint_ns)``, ``langgraph:["<thread_id>", "<ns>"]``,
  and a **namespace registry** run per thread, ``langgraph-ns:["<thread_id>"]`` (layout §1).
* Every ``put`` is one *checkpoint record* (``"lg": "C"``); a ``put_writes`` is one
  *pending-writes object* beside the run's newest record (a tool outcome, folded into the next
  checkpoint record and then deleted, §4a), or, on an empty run, one *writes record*
  (``"lg": "W"``). Records are snapstore checkpoints with a generated id whose message list
  holds the messages (one per chunk, as ``message_to_dict`` JSON) and the serde items, whose
  session state holds the layout (positions) and whose metadata holds what listing needs
  (layout §2-§4). Records of the earlier layout (``"lg": "c"``/``"w"``) are still read (§7).
* The run's **newest record** always carries the latest checkpoint with its pending writes and
  DeltaChannel history sections (§4, §5), with the pending-writes objects beside it and its
  parent (§4a), so a fresh ``get_state`` reads one record and one listing of the run's writes
  area, and a step's cost does not grow with the run.
* Every record is saved on top of the run's newest record as a compare-and-swap on it
  (``expect_head``) and built again when another writer moved the run. Time travel and new
  roots are plain saves; two processes writing one thread both succeed, the later put being the
  newer checkpoint (as LangGraph's SQL savers do).
* "Latest" (``get_tuple`` without ``checkpoint_id``) is the checkpoint put last; ``list`` orders
  by checkpoint id, newest first. LangGraph's ids grow with time, so the two agree for graphs.

Modules, bottom to top (each imports only the ones before it; ``tests/test_layers.py`` checks):

1. ``deps``: the LangGraph/LangChain names, imported once (MissingDependencyError without them).
2. ``gcpause``: reading a large record with the cyclic garbage collector paused.
3. ``ids``: run ids of threads and registries, and configs.
4. ``values``: channel and write values as stored items (``ValueCodec``).
5. ``layout``: the record layout: kinds and fields, ``Rec``/``RunIndex``, write descriptors,
   what the newest record carries (``covers``), decoding a checkpoint.
6. ``state``: ``SaverState``, what a saver holds of each run, and reading a run's records.
7. ``registry``: a thread's namespace registry, and the saver's runs.
8. ``save``: saving a record as a compare-and-swap on the run's newest one.
9. ``needs``: what retention must keep with a record (``snapstore.needs``).
10. ``writes``: writes records, and reading pending writes back.
11. ``sidewrites``: pending-writes objects: ``put_writes``, folding them into the head, deleting.
12. ``history``: DeltaChannel history sections and the history walk.
13. ``checkpoints``: encoding a checkpoint record, and ``put``.
14. ``reads``: ``get_tuple`` and ``list``.
15. ``threads``: delete, copy, prune.
16. ``aio``: the async methods.
17. ``saver``: ``SnapstoreSaver``, thin, delegating to the above.
"""

from __future__ import annotations

from .ids import NS_PREFIX, RUN_PREFIX, ns_run_id_for, parse_run_id, run_id_for
from .needs import DELTA_CHAIN  # noqa: F401 - the module-level name the single module had
from .saver import SnapstoreSaver

__all__ = ["SnapstoreSaver", "RUN_PREFIX", "NS_PREFIX", "run_id_for", "ns_run_id_for", "parse_run_id"]
