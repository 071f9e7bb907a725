"""Reading checkpoints: the head and its messages (``latest``), a checkpoint by id, metadata only
(``head``, ``summary``), a run's checkpoints (``list``), the runs (``runs``), resume points.

Layer 4 (docs/format.md §12, §19, §20). A read updates the manager's view of the run and what the
calling context saw (reading the head lets it continue from the head; reading an older checkpoint
needs ``parent_id=`` to branch). Reads that find a segment gone (merged and deleted by the run's
writer meanwhile) read the run's newest record again (:data:`READ_RETRIES`). Functions take the
manager (``mgr``).
"""

from __future__ import annotations

import threading

from . import callers, firstread, history, replay, views
from ..repo.log import runmarks
from .callers import Seen
from .checkpoint import Checkpoint, CheckpointSummary, make_checkpoint
from ..errors import CheckpointNotFound, InvalidInputError, NotFoundError, ObjectNotFound
from ..format import keys
from ..format.ids import check_checkpoint_id, check_run_id
from ..format.manifest import KIND_ROLLBACK, KIND_TOMBSTONE, Manifest


def latest(mgr, run_id: str) -> Checkpoint | None:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.latest` (arguments, return value and
    errors as documented there)."""
    with mgr.state.run_lock(run_id):
        early = firstread.early_listing(mgr, run_id, 1)  # beside the config GET of a fresh manager
        if not mgr.state.exists():
            # nothing there yet: remember that this manager saw the run empty
            mgr.state.views[run_id] = views.RunView(head_seq=None, head=None, loaded=True, confirmed_at=mgr.state.clock())
            views.saw(mgr, run_id, None, None, None)
            return None
        v = views.load_view(mgr, run_id, firstread.listed(early, mgr.state.run_key(run_id)))
        if v.head is None:
            views.saw_view(mgr, run_id, v)
            return None
        for attempt in range(mgr.READ_RETRIES):
            try:
                msgs, ls = mgr.repo.load_with_state(v.head, v.head_segs)
                break
            except NotFoundError:
                # the run's writer merged the segments we read into a new tier pack and
                # deleted them: read the newest record again (a busy writer may do it again)
                if attempt == mgr.READ_RETRIES - 1:
                    raise
                v = views.load_view(mgr, run_id)
                if v.head is None:
                    views.saw_view(mgr, run_id, v)
                    return None
        v.list_state = ls
        views.saw_view(mgr, run_id, v)
        return make_checkpoint(mgr.repo, v.head, msgs)


def get(mgr, run_id: str, checkpoint_id: str) -> Checkpoint:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.get` (arguments, return value and
    errors as documented there)."""
    check_checkpoint_id(checkpoint_id)
    with mgr.state.run_lock(run_id):
        if not mgr.state.exists():
            raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
        rk = mgr.state.run_key(run_id)
        # format 2: the run's newest record lists the segments holding every checkpoint's
        # entries (an older record's list may name packs merged away since): read it beside
        f_view = None
        v = mgr.state.views.get(run_id)
        if v is None or not v.loaded:
            f_view = mgr.repo.pool.submit(views.load_view, mgr, run_id)
        try:
            m = mgr.repo.find_checkpoint(rk, checkpoint_id)
        except CheckpointNotFound:
            raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None
        finally:
            if f_view is not None:
                f_view.result()
        v = mgr.state.views.get(run_id)
        segs = v.head_segs if v is not None and v.head_segs else None
        for attempt in range(mgr.READ_RETRIES):
            try:
                msgs, ls = mgr.repo.load_with_state(m, segs)
                break
            except NotFoundError:
                if attempt == mgr.READ_RETRIES - 1:
                    raise
                segs = views.load_view(mgr, run_id).head_segs or None
        v = mgr.state.views.get(run_id)
        if v is not None and v.loaded and v.head is not None and v.head.checkpoint_id == m.checkpoint_id:
            v.list_state = ls
            views.saw_view(mgr, run_id, v)  # the caller read the head: it may continue from it
        else:
            # an older checkpoint: a save needs parent_id=; what the caller saw of the head stays
            prev = callers.seen(mgr, run_id)
            callers.set_seen(mgr, run_id, Seen(m.checkpoint_id, prev.seq if prev else None,
                                               prev.write_id if prev else None, at_head=False,
                                               known=prev is not None and prev.known,
                                               **({"wall": prev.wall} if prev else {})))
        return make_checkpoint(mgr.repo, m, msgs)


def head(mgr, run_id: str) -> CheckpointSummary | None:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.head` (arguments, return value and
    errors as documented there)."""
    check_run_id(run_id)
    if not mgr.state.exists():
        return None
    rk = mgr.state.run_key(run_id)
    newest = mgr.repo.head(rk)
    replay.check_newest(mgr, run_id, rk, newest)
    m = history.resolve(mgr.repo, rk, newest)
    return None if m is None else CheckpointSummary.from_manifest(m)


def summary(mgr, run_id: str, checkpoint_id: str) -> CheckpointSummary:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.summary` (arguments, return value and
    errors as documented there)."""
    check_run_id(run_id)
    check_checkpoint_id(checkpoint_id)
    if not mgr.state.exists():
        raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
    try:
        return CheckpointSummary.from_manifest(mgr.repo.find_checkpoint(mgr.state.run_key(run_id), checkpoint_id))
    except CheckpointNotFound:
        raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None


def list_checkpoints(mgr, run_id: str, limit: int | None = None, *, metadata: dict | None = None,
         before_seq: int | None = None) -> list[CheckpointSummary]:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.list` (arguments, return value and
    errors as documented there)."""
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise InvalidInputError(f"limit must be a non-negative integer, got {limit!r}")
    if before_seq is not None and (not isinstance(before_seq, int) or before_seq < 0):
        raise InvalidInputError(f"before_seq must be a non-negative integer, got {before_seq!r}")
    out = []
    check_run_id(run_id)
    if limit == 0:
        return out
    small = limit is not None and limit <= mgr.BULK_LIST_MIN
    early = firstread.early_listing(mgr, run_id, history.first_page_limit(limit)) \
        if small and before_seq is None else None  # beside the config GET of a fresh manager
    if not mgr.state.exists():
        return out
    rk = mgr.state.run_key(run_id)
    if small:
        scan = history.scan(mgr.repo, rk, below=before_seq, want=limit, first=firstread.listed(early, rk))
    else:
        scan = history.scan_bulk(mgr.repo, rk, below=before_seq, want=limit)
    for s, cid, m in scan:
        if metadata:
            md = m.fields.get("metadata")
            if not isinstance(md, dict) or any(k not in md or md[k] != val for k, val in metadata.items()):
                continue
        out.append(CheckpointSummary.from_manifest(m))
        if limit is not None and len(out) >= limit:
            break
    return out


def runs(mgr) -> list[str]:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.runs` (arguments, return value and
    errors as documented there)."""
    from concurrent.futures import ThreadPoolExecutor

    ex = ThreadPoolExecutor(2, thread_name_prefix="snapstore-runs-list")
    # a new manager finds out whether a repository exists beside the listings
    opened = ex.submit(mgr.state.exists) if mgr.state.opened is None else None
    marks = ex.submit(runmarks.list_marks, mgr.store)  # run markers (§13), beside runs/
    ex.shutdown(wait=False)
    try:
        rks = list(mgr.store.list_dirs(keys.RUNS))
        marks = marks.result()
    except Exception:
        if opened is not None and not opened.result():
            return []  # no repository: what the listing said does not matter
        raise
    if opened is not None and not opened.result():
        return []
    got = runmarks.live_run_ids(mgr.store, rks, marks, mgr.repo.run_key, lambda ks: runs_from_heads(mgr, ks),
                                mgr.repo.pool)
    return sorted(got)


def resume_point(mgr, run_id: str) -> tuple[object, Checkpoint] | None:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.resume_point` (arguments, return value and
    errors as documented there)."""
    cp = mgr.latest(run_id)
    if cp is None:
        return None
    return (cp.step if cp.step is not None else cp.seq), cp


def get_resume_point(mgr, run_id: str) -> tuple[object, object, object] | None:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.get_resume_point` (arguments, return value and
    errors as documented there)."""
    rp = mgr.resume_point(run_id)
    if rp is None:
        return None
    step, cp = rp
    return step, cp.session_state, cp.metrics


READ_RETRIES = 5
"""Reads of a checkpoint that find a segment gone (merged and deleted by the run's writer
meanwhile) re-read the run's newest record and try again, at most this many times in all."""


BULK_LIST_MIN = 32
"""``list(limit=...)`` above this (or no limit) reads the log in bulk (:func:`snapstore.manager.history.scan_bulk`)."""


def runs_from_heads(mgr, rks: list[str], opened=None) -> list[str]:
    """The run ids of the run keys ``rks`` whose head is a live checkpoint (in no order).

    Each run costs a LIST (max-keys 1) and, as soon as that returns, a GET of the newest
    record, queued behind the remaining LISTs on one pool of ``store.max_concurrency``
    threads, so n runs take about ``2n / max_concurrency`` sequential round trips. A ``b`` key
    segment is decoded to the run id; an ``h`` (hashed) one takes it from the manifest
    (``read_manifest_key`` checks that they agree). ``opened``: a future of
    :meth:`~snapstore.manager.state.ManagerState.exists`
    still running; GETs wait for it and are skipped when it is False.

    The GET is skipped when this manager already read the same head object: what a
    checkpoint or tombstone record at a key says cannot change while its ETag (from the LIST)
    stays the same, so the answer is remembered per run as ``(key, ETag, run id or None)``.
    Rollback heads are always read and resolved again (their target may have gone since).

    Raises:
        StoreError (and subclasses), IntegrityError: as :meth:`snapstore.manager.facade.CheckpointManager.runs`.
    """
    from concurrent.futures import Future, ThreadPoolExecutor

    from ..format.ids import decode_name_key
    from ..stores.base import max_concurrency

    if not rks:
        return []
    store = mgr.store
    seen = mgr.state.runs_seen  # run key -> (head key, ETag, run id | None)

    def run_id(rk: str, m: Manifest) -> str:
        if rk.startswith("b"):
            try:
                return decode_name_key(rk)
            except (ValueError, UnicodeDecodeError):  # not a name segment (binascii.Error)
                pass
        return m.run_id

    def read_head(rk: str, key: str, etag: str) -> str | None:
        if opened is not None and not opened.result():
            return None
        repo = mgr.repo  # open by now
        try:
            newest = repo.read_manifest_key(key)
        except ObjectNotFound:
            newest = repo.head(rk)  # removed between LIST and GET: look again
            etag = None             # (not the object listed: nothing to remember)
        if newest is None:
            return None
        if newest.kind == KIND_ROLLBACK:
            return None if history.resolve(mgr.repo, rk, newest) is None else run_id(rk, newest)
        got = None if newest.kind == KIND_TOMBSTONE else run_id(rk, newest)
        if etag:
            mgr.state.remember_run_head(rk, (key, etag, got))
        return got

    def known_head(value: str | None) -> Future:  # a head answered from ``seen``: a done future
        fut: Future = Future()
        fut.set_result(value)
        return fut

    lock = threading.Lock()
    futures: list = []

    def find_head(rk: str) -> None:
        for info in store.list(keys.manifests_prefix(rk), limit=1):
            known = seen.get(rk)
            if known is not None and known[:2] == (info.key, info.etag) and info.etag and opened is None:
                fut = known_head(known[2])
            else:
                fut = pool.submit(read_head, rk, info.key, info.etag)
            with lock:
                futures.append(fut)

    pool = ThreadPoolExecutor(min(len(rks), max_concurrency(store)), thread_name_prefix="snapstore-runs")
    try:
        with lock:
            futures.extend(pool.submit(find_head, rk) for rk in rks)
        out, i = [], 0
        while True:  # each LIST's future is waited for before the GET future it adds
            with lock:
                if i >= len(futures):
                    return out
                fut = futures[i]
            i += 1
            got = fut.result()
            if got is not None:
                out.append(got)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
