"""A thread's namespace registry (docs/langgraph-layout.md §1) and the runs of the saver.

The run ``langgraph-ns:["<thread_id>"]`` lists every namespace of a thread: each of its records
holds them all (session state ``{"lgns": [...]}``; metadata ``{"lgns": count}``), so one read of
its newest record gives a thread's runs without listing the repository.
"""

from __future__ import annotations

from ...errors import CheckpointNotFound, ConflictError, IntegrityError
from ...manager.facade import EMPTY_RUN
from .ids import ns_run_id_for, parse_run_id, run_id_for
from .state import SaverState


def registry(s: SaverState, thread_id: str) -> tuple[str | None, set[str]] | None:
    """``(head id, namespaces)`` of the thread's registry run as its newest record holds
    them (each record holds them all, so retention that keeps only the newest records of a
    run loses none), or None when the thread has no registry (a thread written before
    registries, or none at all).

    Raises:
        IntegrityError: the registry's newest record is not a registry record.
    """
    cp = s.manager.latest(ns_run_id_for(thread_id))
    if cp is None:
        return None
    st = cp.session_state
    got = st.get("lgns") if isinstance(st, dict) else None
    if not isinstance(got, list) or not all(isinstance(x, str) for x in got):
        raise IntegrityError(f"run {ns_run_id_for(thread_id)!r} record {cp.id!r}",
                             "not a LangGraph namespace registry record (session state needs \"lgns\": [str])")
    return cp.id, set(got)


def namespaces(s: SaverState, thread_id: str) -> set[str] | None:
    """The namespaces the thread's registry lists (every namespace a saver of this version
    created in it), or None without a registry. Reads the registry's newest record: costs
    what the thread holds, not what the repository holds."""
    reg = registry(s, thread_id)
    return None if reg is None else reg[1]


def register(s: SaverState, run: str) -> None:
    """Make sure the thread's registry lists ``run``'s namespace before its first record is
    saved (so a crash cannot leave a namespace that listing the thread misses). A new registry
    also registers the namespaces the thread already has (written before registries), found by
    listing every run once, unless ``run`` is the root namespace of a thread whose root run is
    empty. One read of the registry's newest record when registered already; a save (2 PUTs)
    more when not.

    Raises:
        ConflictError: other writers kept moving the registry (``save_attempts`` times).
    """
    p = parse_run_id(run)
    if p is None:
        return
    thread_id, ns = p
    reg = ns_run_id_for(thread_id)
    for attempt in range(s.save_attempts):
        got = registry(s, thread_id)
        head, have = got if got is not None else (None, set())
        if ns in have:
            return
        add = have | {ns}
        if got is None and (ns != "" or s.manager.head(run_id_for(thread_id, "")) is not None):
            # a new registry: the thread's namespaces of an earlier version are registered too
            add.update(n for _r, _t, n in scan_runs(s, thread_id))
        try:
            s.manager.save(reg, [], metadata={"lgns": len(add)}, session_state={"lgns": sorted(add)},
                           parent_id=head, expect_head=head or EMPTY_RUN)
            return
        except (ConflictError, CheckpointNotFound):
            if attempt == s.save_attempts - 1:
                raise


def runs(s: SaverState, thread_id: str | None = None) -> list[tuple[str, str, str]]:
    """``(run, thread_id, ns)`` of this saver's runs: of one thread (the namespaces its
    registry lists, some possibly empty; without a registry every live run of the
    repository is listed), or every live run."""
    if thread_id is not None:
        nss = namespaces(s, str(thread_id))
        if nss is not None:
            return [(run_id_for(str(thread_id), n), str(thread_id), n) for n in sorted(nss)]
    return scan_runs(s, thread_id)


def scan_runs(s: SaverState, thread_id: str | None = None) -> list[tuple[str, str, str]]:
    """``(run, thread_id, ns)`` of this saver's live runs (of one thread, or all), from a
    listing of every run of the repository."""
    out = []
    for r in s.manager.runs():
        p = parse_run_id(r)
        if p is not None and (thread_id is None or p[0] == str(thread_id)):
            out.append((r, p[0], p[1]))
    return out
