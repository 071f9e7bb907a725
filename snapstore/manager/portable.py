"""Portable bundles: runs exported to one file and imported into any repository (docs/format.md §30).

Layer 4. :func:`export_bundle` writes the live checkpoints of the named runs (oldest first, each
with its id, log position, parent, fork origin, creation time, summary fields, messages, session
state and tool outcomes) through :class:`~snapstore.format.portable.BundleWriter`; a checkpoint's
message list is stored as a prefix of an earlier checkpoint of the bundle (``base``, ``keep``)
plus its new messages, so a run costs about its final history, and the zstd stream (level 19,
128 MiB window, long-range matching) stores repeats across runs as matches.

:func:`import_bundle` reads the file twice: first whole, checking every block, the trailer and
every item, writing nothing (a damaged or truncated file is an :class:`IntegrityError` naming
what is wrong, and nothing is imported); then again, saving each checkpoint at its own log
position with its own id and time (the positions between are put on record as removed, §16),
and recording its outcomes. Values are the readers' and writers' own: the source and target may
be any backends, encrypted or not (the file holds plaintext).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone

import blake3

from . import fork, history, save
from .save import RecordAt
from ..errors import ConflictError, IntegrityError, InvalidInputError, RunNotFound, SnapstoreError
from ..format import outcomes as fo
from ..format.codec import encode_json, loads_exact
from ..format.ids import check_run_id
from ..format.manifest import KIND_TOMBSTONE
from ..format.portable import BundleWriter, read_items
from ..format.times import format_time, parse_time
from ..format.removals import to_ranges

__all__ = ["EXISTING", "ExportReport", "ImportReport", "export_bundle", "import_bundle", "check_bundle"]

FORMAT_NAME = "snapstore-bundle"
BASES = 32
"""Recent checkpoints whose message lists a writer and a reader keep to resolve ``base``."""
EXISTING = ("fail", "skip", "resume")
"""What :func:`import_bundle` does with a run the target already has (``existing=``)."""
_FIELDS = ("step", "token_usage", "metrics", "agent_id", "status", "metadata")


@dataclass
class ExportReport:
    """What :func:`export_bundle` wrote.

    Attributes:
        runs: run ids written, in file order. checkpoints: checkpoints written.
        messages: messages stored (the new ones of each checkpoint). outcomes: tool outcomes.
        raw_bytes: bytes of the items before compression. bytes: the file's length.
    """

    runs: list = field(default_factory=list)
    checkpoints: int = 0
    messages: int = 0
    outcomes: int = 0
    raw_bytes: int = 0
    bytes: int = 0


@dataclass
class ImportReport:
    """What :func:`import_bundle` did (or, from :func:`check_bundle`, what the file holds).

    Attributes:
        runs: run ids imported (or held). skipped: run id -> why not imported.
        checkpoints: checkpoints saved (held). outcomes: tool outcomes recorded (held).
        resumed: run id -> checkpoints that were already there (``existing="resume"``).
        positions: run id -> ``[(log position, checkpoint id), ...]`` the bundle holds, oldest first.
    """

    runs: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)
    checkpoints: int = 0
    outcomes: int = 0
    resumed: dict = field(default_factory=dict)
    positions: dict = field(default_factory=dict)


def _j(value) -> bytes:
    return encode_json(value)[0]


def _digests(encoded: list) -> list:
    return [blake3.blake3(b).digest(16) for b in encoded]


def _outcome_seqs(mgr, rk: str) -> set:
    """Log positions of the run's checkpoints that have outcome objects (one LIST)."""
    out = set()
    for info in mgr.repo.store.list(fo.outcomes_prefix(rk)):
        parsed = fo.parse_outcome_key(info.key)
        if parsed is not None:
            a = fo.parse_anchor(parsed[1])
            if a is not None and a[0] == "c":
                out.add(a[1])
    return out


def export_bundle(mgr, run_ids: list, f, progress=None) -> ExportReport:
    """Write the live checkpoints of ``run_ids`` to binary file object ``f`` as a portable bundle.

    Args:
        mgr: the manager (source repository; opened with its keys when encrypted).
        run_ids: the runs (ids, each once), written in this order.
        f: a binary file object open for writing; the bundle is complete when this returns.
        progress: optional ``progress(run_id, done, total)`` (checkpoints of the run).
    Returns:
        An :class:`ExportReport`.
    Raises:
        InvalidInputError: no run, or a run named twice. RunNotFound: a run has no live checkpoint.
        StoreError / IntegrityError / ColdObjectError: a read failed (an archived run in a cold
            class must be restored first).
    """
    run_ids = list(run_ids)
    if not run_ids:
        raise InvalidInputError("name at least one run to export")
    if len(set(run_ids)) != len(run_ids):
        raise InvalidInputError("a run is named twice")
    for r in run_ids:
        check_run_id(r)
    logs = {}
    for r in run_ids:  # every run listed before the first byte is written
        ms = [] if not mgr.state.exists() else [m for _s, _c, m in history.scan_bulk(mgr.repo, mgr.state.run_key(r))]
        if not ms:
            raise RunNotFound(f"run {r!r} has no live checkpoint to export")
        logs[r] = sorted(ms, key=lambda m: m.seq)
    repo = mgr.repo
    header = {"format": FORMAT_NAME, "version": 1, "created": format_time(datetime.now(timezone.utc)),
              "source": repo.config.repo_id, "runs": run_ids,
              "checkpoints": {r: len(ms) for r, ms in logs.items()}}
    w = BundleWriter(f, _j(header))
    rep = ExportReport()
    recent: OrderedDict = OrderedDict()  # (run, id) -> digests of its messages
    for r in run_ids:
        ms = logs[r]
        rk = mgr.state.run_key(r)
        with_outcomes = _outcome_seqs(mgr, rk)
        reader = mgr.read_run(r)
        w.item(b"R", _j({"run": r, "checkpoints": len(ms)}))
        prev = None
        for i, m in enumerate(ms):
            cp = reader.get(m.checkpoint_id)
            enc = [encode_json(x)[0] for x in cp.messages]
            dig = _digests(enc)
            base, keep = None, 0
            for cand in ((r, m.parent_id), (m.origin["run"], m.origin["id"]) if m.origin else None, prev):
                if cand is None or cand not in recent:
                    continue
                bd = recent[cand]
                k = 0
                n = min(len(bd), len(dig))
                while k < n and bd[k] == dig[k]:
                    k += 1
                if k > keep or base is None:
                    base, keep = cand, k
            if base is not None and keep == 0:
                base = None
            outs = mgr.outcomes(r, m.checkpoint_id) if m.seq in with_outcomes else {}
            head = {"id": m.checkpoint_id, "seq": m.seq, "created": format_time(m.created), "parent": m.parent_id,
                    "fields": {k: m.fields[k] for k in _FIELDS if m.fields.get(k) is not None},
                    "count": len(enc), "bytes": m.size, "base": list(base) if base else None, "keep": keep,
                    "add": len(enc) - keep, "state": cp.session_state is not None, "outcomes": len(outs)}
            if m.origin:
                head["origin"] = {"run": m.origin["run"], "id": m.origin["id"]}
            w.item(b"C", _j(head))
            for b in enc[keep:]:
                w.item(b"M", b)
            if cp.session_state is not None:
                w.item(b"S", _j(cp.session_state))
            for call in sorted(outs):
                w.item(b"O", _j({"call": call, "result": outs[call]}))
            recent[(r, m.checkpoint_id)] = dig
            recent.move_to_end((r, m.checkpoint_id))
            while len(recent) > BASES:
                recent.popitem(last=False)
            prev = (r, m.checkpoint_id)
            rep.checkpoints += 1
            rep.messages += len(enc) - keep
            rep.outcomes += len(outs)
            if progress:
                progress(r, i + 1, len(ms))
        rep.runs.append(r)
    w.item(b"X", _j({"runs": len(run_ids), "checkpoints": rep.checkpoints}))
    w.close()
    rep.raw_bytes, rep.bytes = w.raw, w.stored
    return rep


@dataclass
class _Cp:
    """One checkpoint as read from a bundle."""

    run: str
    head: dict
    messages: list          # the new messages (values)
    state: object = None
    outcomes: list = field(default_factory=list)


def _parse(name: str, what: str, body: bytes):
    try:
        return loads_exact(body)
    except ValueError as e:
        raise IntegrityError(name, f"damaged: {what} is not JSON ({e})") from None


def _need(name: str, d, key: str, types, what: str):
    v = d.get(key) if isinstance(d, dict) else None
    if not isinstance(v, types) or isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise IntegrityError(name, f"damaged: {what} has no valid {key!r}")
    return v


def _checkpoints(f, name: str):
    """Yield the header (dict), then each run's id (str) and its checkpoints (:class:`_Cp`), from
    bundle file object ``f``, checking the items' order and shapes. Raises IntegrityError."""
    items = read_items(f, name)
    header = _parse(name, "the header", next(items))
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise IntegrityError(name, "not a snapstore bundle (its header names no 'snapstore-bundle' format)")
    runs = header.get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
        raise IntegrityError(name, "damaged: the header's 'runs' is not a list of run ids")
    yield header
    run, left_cps, cur, left_msgs, want_state, left_outs = None, 0, None, 0, False, 0
    seen_runs, total, ended = [], 0, False

    def flush():
        nonlocal cur
        if cur is not None:
            if left_msgs or want_state or left_outs:
                raise IntegrityError(name, f"damaged: checkpoint {cur.head['id']!r} of run {cur.run!r} is incomplete")
            out, cur = cur, None
            return out
        return None

    for kind, body in items:
        if ended:
            raise IntegrityError(name, "damaged: items after the end item")
        if kind == "M":
            if cur is None or not left_msgs:
                raise IntegrityError(name, "damaged: a message outside a checkpoint")
            cur.messages.append(_parse(name, f"a message of checkpoint {cur.head['id']!r}", body))
            left_msgs -= 1
            continue
        if kind == "S":
            if cur is None or left_msgs or not want_state:
                raise IntegrityError(name, "damaged: a session state out of place")
            cur.state = _parse(name, f"the session state of checkpoint {cur.head['id']!r}", body)
            want_state = False
            continue
        if kind == "O":
            if cur is None or left_msgs or want_state or not left_outs:
                raise IntegrityError(name, "damaged: a tool outcome out of place")
            o = _parse(name, "a tool outcome", body)
            _need(name, o, "call", str, "a tool outcome")
            if "result" not in o:
                raise IntegrityError(name, "damaged: a tool outcome has no result")
            cur.outcomes.append((o["call"], o["result"]))
            left_outs -= 1
            continue
        done = flush()
        if done is not None:
            yield done
        if kind == "C":
            if run is None or not left_cps:
                raise IntegrityError(name, "damaged: a checkpoint outside a run")
            h = _parse(name, "a checkpoint header", body)
            what = f"a checkpoint header of run {run!r}"
            _need(name, h, "id", str, what)
            what = f"checkpoint {h['id']!r} of run {run!r}"
            _need(name, h, "created", str, what)
            for k in ("seq", "count", "keep", "add", "outcomes", "bytes"):
                if not isinstance(h.get(k), int) or isinstance(h.get(k), bool) or h[k] < 0:
                    raise IntegrityError(name, f"damaged: {what} has no valid {k!r}")
            if h["keep"] + h["add"] != h["count"] or (h["keep"] and not isinstance(h.get("base"), list)):
                raise IntegrityError(name, f"damaged: {what} has inconsistent message counts")
            if not isinstance(h.get("fields"), dict) or not isinstance(h.get("state"), bool):
                raise IntegrityError(name, f"damaged: {what} has no valid 'fields' or 'state'")
            try:
                parse_time(h["created"])
            except (ValueError, TypeError, InvalidInputError):
                raise IntegrityError(name, f"damaged: {what} has a bad 'created' time") from None
            cur = _Cp(run, h, [])
            left_msgs, want_state, left_outs = h["add"], h["state"], h["outcomes"]
            left_cps -= 1
            total += 1
        elif kind == "R":
            if run is not None and left_cps:
                raise IntegrityError(name, f"damaged: run {run!r} lacks {left_cps} checkpoints")
            d = _parse(name, "a run item", body)
            run = _need(name, d, "run", str, "a run item")
            left_cps = _need(name, d, "checkpoints", int, f"run {run!r}")
            if len(seen_runs) >= len(runs) or runs[len(seen_runs)] != run:
                raise IntegrityError(name, f"damaged: run {run!r} is not the next run the header names")
            seen_runs.append(run)
            yield run
        elif kind == "X":
            if run is not None and left_cps:
                raise IntegrityError(name, f"damaged: run {run!r} lacks {left_cps} checkpoints")
            d = _parse(name, "the end item", body)
            if seen_runs != runs or not isinstance(d, dict) or d.get("checkpoints") != total:
                raise IntegrityError(name, "damaged: the end item's counts differ from what the file holds")
            ended = True
        else:
            raise IntegrityError(name, f"damaged: unknown item kind {kind!r}")
    if not ended:
        raise IntegrityError(name, "truncated: no end item")


def check_bundle(path: str) -> ImportReport:
    """Read bundle file ``path`` whole and check it (blocks, trailer, every item); write nothing.

    Returns:
        An :class:`ImportReport` of what it holds (``runs``, ``checkpoints``, ``outcomes``).
    Raises:
        IntegrityError: damaged or truncated (names the file and what is wrong).
        UnsupportedFormatError: a newer bundle version. OSError: the file cannot be read.
    """
    rep = ImportReport()
    with open(path, "rb") as f:
        it = _checkpoints(f, path)
        next(it)
        for x in it:
            if isinstance(x, str):
                rep.runs.append(x)
                rep.positions[x] = []
            else:
                rep.positions[x.run].append((x.head["seq"], x.head["id"]))
                rep.checkpoints += 1
                rep.outcomes += len(x.outcomes)
    return rep


def _state_of_target(mgr, run: str):
    """``(live checkpoint (seq, id) list oldest first, newest record's seq or None)`` in the target."""
    if not mgr.state.exists():
        return [], None
    rk = mgr.state.run_key(run)
    newest = mgr.repo.head(rk)
    if newest is None:
        return [], None
    live = [(m.seq, m.checkpoint_id) for _s, _c, m in history.scan_bulk(mgr.repo, rk)]
    return sorted(live), newest.seq


def import_bundle(mgr, path: str, existing: str = "fail", progress=None, checked: ImportReport | None = None) -> ImportReport:
    """Import every run of bundle file ``path`` into the manager's repository, exactly.

    The whole file is checked first (:func:`check_bundle`); nothing is written for a damaged
    one. Then each run's checkpoints are saved oldest first at their own log positions with their
    own ids, parents, origins, times, fields, messages and session states, and their tool outcomes
    recorded.

    Args:
        mgr: the manager (target repository; created if the location is empty and the manager
            creates repositories).
        path: the bundle file.
        existing: a run the target already has: ``"fail"`` (default: ConflictError before anything
            is written), ``"skip"`` (leave it, import the others), ``"resume"`` (it holds the first
            checkpoints of the bundle's run at the same positions, as an interrupted import
            leaves it: save the rest; any other content is a ConflictError).
        progress: optional ``progress(run_id, done, total)``.
        checked: what :func:`check_bundle` returned for ``path`` just now (it is not read twice), or None.
    Returns:
        An :class:`ImportReport`.
    Raises:
        InvalidInputError: a bad ``existing``.
        IntegrityError / UnsupportedFormatError: the file is damaged, truncated or newer (nothing written).
        ConflictError: a run exists (``fail``), does not continue into the bundle's (``resume``), or
            was deleted in the target while its log still holds the positions the bundle's needs
            (run ``gc`` first, or import elsewhere).
        StoreError: a write failed; the runs imported so far stay, and the interrupted one holds
            its first checkpoints: import again with ``existing="resume"``.
    """
    if existing not in EXISTING:
        raise InvalidInputError(f"existing must be one of {', '.join(EXISTING)}, not {existing!r}")
    held = checked if checked is not None else check_bundle(path)
    firsts = held.positions
    plan = {}
    conflicts = []
    for r in held.runs:
        live, newest = _state_of_target(mgr, r)
        want = firsts[r]
        if live:
            if existing == "skip":
                plan[r] = "skip"
                continue
            if existing == "resume" and live == want[:len(live)]:
                plan[r] = len(live)
                continue
            conflicts.append(r)
            continue
        if newest is not None and want and want[0][0] <= newest:
            raise ConflictError(f"run {r!r} was deleted in {mgr.store.url} and its log still holds positions up to "
                                f"{newest}, which the bundle's run needs (from {want[0][0]}): run 'snapstore gc' there "
                                "first, or import into another repository")
        plan[r] = 0
    if conflicts:
        more = "" if existing == "resume" else " (existing 'skip' leaves them, 'resume' finishes an interrupted " \
                                                "import of them: --existing skip|resume)"
        conflicts = list(conflicts)
        shown = ", ".join(repr(r) for r in conflicts[:5]) + (f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else "")
        runs = f"run {shown}" if len(conflicts) == 1 else f"runs of the bundle ({len(conflicts)}): {shown}"
        if existing == "resume":
            raise ConflictError(f"the target already has {runs}, which differ from the bundle's (not the beginning "
                                "of an interrupted import of it): import into another repository, or delete them "
                                "there first")
        raise ConflictError(f"the target already has {runs}{more}")
    rep = ImportReport()
    recent: OrderedDict = OrderedDict()  # (run, id) -> message list
    with open(path, "rb") as f:
        it = _checkpoints(f, path)
        next(it)
        run, skip, done, total = None, False, 0, 0
        for x in it:
            if isinstance(x, str):
                if run is not None and not skip:
                    rep.runs.append(run)
                run, done = x, 0
                total = len(firsts[run])
                skip = plan[run] == "skip"
                if skip:
                    rep.skipped[run] = "the target already has it"
                    continue
                if plan[run]:
                    rep.resumed[run] = plan[run]
                _record_gaps(mgr, run, [s for s, _ in firsts[run]], plan[run])
                continue
            if skip:
                continue
            h = x.head
            base = tuple(h["base"]) if h.get("base") else None
            if h["keep"]:
                prefix = recent.get(base)
                if prefix is None:
                    try:
                        prefix = mgr.get(base[0], base[1]).messages
                    except Exception as e:  # noqa: BLE001 - named below
                        raise IntegrityError(path, f"damaged: checkpoint {h['id']!r} of run {run!r} continues "
                                                   f"{base[1]!r} of run {base[0]!r}, which is not here ({e})") from None
                msgs = list(prefix[:h["keep"]]) + x.messages
            else:
                msgs = x.messages
            done += 1
            if done <= (plan[run] or 0):
                pass  # already there (resume)
            else:
                # a run's first checkpoint that is a fork is made a fork again (by reference to its
                # origin's data); it is counted, and its tool outcomes recorded, like a save
                if not (done == 1 and _fork(mgr, run, h, msgs, x.state)):
                    _save(mgr, run, h, msgs, x.state, firsts[run][:done - 1])
                for call, result in x.outcomes:
                    mgr.record_outcome(run, h["id"], call, result)
                rep.checkpoints += 1
                rep.outcomes += len(x.outcomes)
            recent[(run, h["id"])] = msgs
            recent.move_to_end((run, h["id"]))
            while len(recent) > BASES:
                recent.popitem(last=False)
            if progress:
                progress(run, done, total)
        if run is not None and not skip:
            rep.runs.append(run)
    return rep


def _record_gaps(mgr, run: str, seqs: list, already: int) -> None:
    """Put the positions below the run's newest imported one that hold none of its checkpoints on
    record as removed (§16), before the first of them is saved (a run resumed: done already)."""
    if already or not seqs:
        return
    repo = mgr.repo
    rk = mgr.state.run_key(run)
    newest = repo.head(rk)
    lo = 0 if newest is None else newest.seq + 1
    have = set(seqs)
    gaps = [p for p in range(lo, max(seqs)) if p not in have]
    if gaps:
        repo.record_removals(rk, ranges=to_ranges(gaps))


def _fork(mgr, run: str, h: dict, msgs: list, state) -> bool:
    """Import the first checkpoint ``h`` of run ``run`` as a fork (a reference to its source's
    data, §10) when it is one: it names an ``origin`` and no parent, the origin checkpoint is in
    the target (imported from this bundle or there before), and its messages, session state and
    fields are exactly the origin's. Returns True if written so; False leaves it to a save."""
    o = h.get("origin")
    if not o or h.get("parent") is not None:
        return False
    try:
        src = mgr.repo.find_checkpoint(mgr.state.run_key(o["run"]), o["id"])
        cp = mgr.get(o["run"], o["id"])
    except SnapstoreError:
        return False
    fields = {k: src.fields[k] for k in _FIELDS if src.fields.get(k) is not None}
    if (_j(fields) != _j(h["fields"]) or _j(cp.session_state) != _j(state)
            or len(cp.messages) != len(msgs) or any(_j(a) != _j(b) for a, b in zip(cp.messages, msgs))):
        return False
    fork.fork(mgr, o["run"], o["id"], run, at=RecordAt(h["seq"], parse_time(h["created"]), o), new_id=h["id"])
    return True


def _save(mgr, run: str, h: dict, msgs: list, state, before: list) -> None:
    """Save one imported checkpoint at its position (its parent as dedup base when imported)."""
    f = h["fields"]
    ids = {c for _s, c in before}
    parent = h.get("parent")
    at = RecordAt(h["seq"], parse_time(h["created"]), h.get("origin"), parent)
    save.save(mgr, run, msgs, step=f.get("step"), token_usage=f.get("token_usage"), session_state=state,
              metrics=f.get("metrics"), agent_id=f.get("agent_id"), status=f.get("status"),
              metadata=f.get("metadata"), checkpoint_id=h["id"],
              parent_id=parent if parent in ids else None, at=at)
    v = mgr.state.views.get(run)
    got = v.head if v is not None else None
    if got is not None and got.checkpoint_id == h["id"] and (got.count != h["count"] or got.size != h["bytes"]):
        raise IntegrityError(path_of(mgr), f"checkpoint {h['id']!r} of run {run!r} was stored with {got.count} "
                                           f"messages of {got.size} bytes, the bundle says {h['count']} of {h['bytes']}")


def path_of(mgr) -> str:
    """What errors call the target repository."""
    return str(getattr(mgr.store, "url", "the repository"))
