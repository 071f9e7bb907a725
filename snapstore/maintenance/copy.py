"""``copy``: a repository copied exactly from one store to another (a directory, a SQLite file, S3,
memory: any two), every object byte for byte.

The order keeps an interrupted copy harmless and resumable:

1. packs, then forwarding records and GC state (what the records below point into);
2. checkpoint-id index records and tool outcomes;
3. manifests, log segments and removal records (the run logs), then run markers;
4. ``config`` last: until it is written the destination is not a repository, so no reader or
   writer opens a half copy, and a rerun resumes (an object already at the destination with the
   same bytes is skipped, one with other bytes is an error naming its key).

The source is listed in the opposite order (everything, then ``packs/`` once more), so a save
that lands on the source during the copy is either wholly in it or its packs are, never a
manifest without its packs. Two transient objects of a running GC are left out: its lock
(``gc/lock``) and its clock probes (``gc/clock-*``). Copy a repository no GC is collecting: an
object GC deletes from the source during the copy ends it with a StoreError naming the key.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from ..errors import InvalidInputError, ObjectNotFound, PreconditionFailed, RepositoryError, RepositoryNotFound, \
    StoreError
from ..format import keys
from ..stores.base import ObjectStore, max_concurrency, whole_read_limit

__all__ = ["CopyConflict", "CopyReport", "copy_repository", "same_location"]

_TRANSIENT = (keys.GC_LOCK, keys.GC_CLOCK)
_LAYOUT_TOPS = {keys.CONFIG, "packs", "runs", "runmarks", "fwd", "gc"}
_RANGE = 64 << 20  # bytes per ranged read of an object too large to read whole
# phase of each kind of key, in copy order (config is written alone, last)
_PHASES = ("packs", "forwarding", "index", "logs", "runmarks", "other")
_PHASE_OF = {"pack": "packs", "fwd": "forwarding", "gc": "forwarding", "index": "index", "manifest": "logs",
             "logseg": "logs", "removals": "logs", "runmark": "runmarks", "pin": "index"}


class CopyConflict(RepositoryError):
    """The destination holds an object the source repository does not have at that key (other
    bytes, or a key the source lacks): it is not an empty location nor an earlier copy of this
    repository. ``key`` names the object."""

    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.key = key


@dataclass
class CopyReport:
    """What :func:`copy_repository` did.

    Attributes:
        objects: objects of the source repository now at the destination (``config`` included).
        copied: of those, how many this call wrote.
        skipped: how many were already there with the same bytes (a resumed or repeated copy).
        bytes_copied: bytes this call wrote.
        left_out: transient keys of a running GC not copied (``gc/lock``, ``gc/clock-*``).
    """

    objects: int = 0
    copied: int = 0
    skipped: int = 0
    bytes_copied: int = 0
    left_out: list = field(default_factory=list)


def _where(store: ObjectStore):
    """What names the place ``store`` keeps its objects: a real path for a directory or SQLite
    file, the URL for S3, the object itself for a memory store."""
    for attr in ("root", "path"):  # LocalStore.root, SqliteStore.path
        p = getattr(store, attr, None)
        if isinstance(p, str):
            return ("path", os.path.realpath(p))
    url = getattr(store, "url", None)
    if isinstance(url, str) and not url.startswith("memory://"):
        return ("url", url)
    return ("object", id(store))


def same_location(a: ObjectStore, b: ObjectStore) -> bool:
    """Whether stores ``a`` and ``b`` keep their objects in one place (the same object, real path
    or S3 URL)."""
    return a is b or _where(a) == _where(b)


def _read(store: ObjectStore, key: str, size: int) -> bytes:
    """All bytes of ``key`` (``size`` bytes as listed), in ranges when it is larger than a whole
    read of its kind may be."""
    if size <= whole_read_limit(key)[0]:
        return store.get(key)
    parts, pos = [], 0
    while pos < size:
        b = store.get(key, (pos, min(size, pos + _RANGE)))
        if not b:
            break
        parts.append(b)
        pos += len(b)
    return b"".join(parts)


def _phase(key: str) -> str:
    kind = keys.parse_key(key).kind
    return _PHASE_OF.get(kind, "index" if kind == "run" else "other")


def _foreign_file(dst: ObjectStore) -> str | None:
    """A file at the top of a directory store that is no part of a repository's layout (the
    store's listing does not show files whose names are not keys)."""
    root = getattr(dst, "root", None)
    if not isinstance(root, str) or not os.path.isdir(root):
        return None
    with os.scandir(root) as entries:
        names = sorted(e.name for e in entries)
    for n in names:
        if n not in _LAYOUT_TOPS and not n.startswith(".tmp-") and n not in (".locks", ".wal"):
            return n
    return None


def copy_repository(src: ObjectStore, dst: ObjectStore,
                    progress: Callable[[str, int, int], None] | None = None) -> CopyReport:
    """Copy the repository in store ``src`` into store ``dst``, exactly (see the module docstring
    for the order and what a rerun does). Afterwards ``dst`` is that repository: ``verify`` passes
    on it when it passes on ``src``, and every run's latest checkpoint is the same.

    Args:
        src: the store holding the repository (any :class:`~snapstore.stores.base.ObjectStore`).
        dst: the store to copy it into: empty, holding an interrupted copy of it (resumed), or a
            complete earlier copy (brought up to date with what the source gained since).
        progress: called as ``progress(phase, done, total)`` with ``phase`` one of ``"packs"``,
            ``"forwarding"``, ``"index"``, ``"logs"``, ``"runmarks"``, ``"other"``, ``"config"``
            (counts of objects).
    Returns:
        A :class:`CopyReport`.
    Raises:
        InvalidInputError: ``src`` and ``dst`` are one location.
        RepositoryNotFound: ``src`` holds no repository.
        RepositoryError: ``dst`` holds another repository (another ``config``), or files that are
            not part of one (:class:`CopyConflict` for a key: other bytes, or not in the source).
        StoreError: a read or write failed (``dst`` unreachable, read-only, disk full), or an
            object vanished from the source during the copy (a GC running on it).
    """
    if same_location(src, dst):
        raise InvalidInputError(f"the source and the destination are the same location: {getattr(dst, 'url', dst)}")
    try:
        config = src.get(keys.CONFIG)
    except ObjectNotFound:
        raise RepositoryNotFound(f"no repository at {getattr(src, 'url', src)} (no config) to copy") from None
    dst_url = getattr(dst, "url", dst)
    try:
        existing = dst.get(keys.CONFIG)
    except ObjectNotFound:
        existing = None
    if existing is not None and existing != config:
        raise RepositoryError(f"the destination {dst_url} holds another repository (its config differs); "
                              "copy into an empty location")
    # the source, listed in reverse dependency order: everything, then packs/ again (a save landing
    # meanwhile wrote its packs before its manifest, so the second listing has them)
    listed = {o.key: o.size for o in src.list("")}
    listed.update((o.key, o.size) for o in src.list(keys.PACKS))
    report = CopyReport()
    report.left_out = sorted(k for k in listed if k == _TRANSIENT[0] or k.startswith(_TRANSIENT[1]))
    for k in report.left_out:
        del listed[k]
    listed.pop(keys.CONFIG, None)
    odd = _foreign_file(dst)
    if odd is not None:
        raise RepositoryError(f"the destination {dst_url} holds {odd}, which is not part of a snapstore repository: "
                              "copy into an empty location")
    have = {o.key: o.size for o in dst.list("")}
    for k in sorted(have):
        if k not in listed and k != keys.CONFIG:
            raise CopyConflict(f"the destination {dst_url} holds {k}, which the source repository does not: "
                               "copy into an empty location", k)

    phases: dict[str, list[str]] = {p: [] for p in _PHASES}
    for k in sorted(listed):
        phases[_phase(k)].append(k)
    workers = max(1, min(max_concurrency(src), max_concurrency(dst), 16))

    def one(key: str) -> tuple[bool, int]:
        try:
            data = _read(src, key, listed[key])
        except ObjectNotFound:
            raise StoreError(f"{key} vanished from the source {getattr(src, 'url', src)} during the copy "
                             "(a GC or delete running on it?); copy again when it is done") from None
        if key in have or key == keys.CONFIG:
            try:
                there = _read(dst, key, have.get(key, len(data)))
            except ObjectNotFound:
                there = None
            if there is not None:
                if there != data:
                    raise CopyConflict(f"the destination {dst_url} holds other bytes at {key} than the source: "
                                       "it is not a copy of this repository", key)
                return False, 0
        try:
            dst.put(key, data)
        except PreconditionFailed:  # written meanwhile (another copy running): same bytes or conflict
            if _read(dst, key, len(data)) != data:
                raise CopyConflict(f"{key} was written at the destination {dst_url} during the copy with other "
                                   "bytes", key) from None
            return False, 0
        return True, len(data)

    def account(phase: str, results, total: int) -> None:
        for i, (wrote, n) in enumerate(results):
            if wrote:
                report.copied += 1
                report.bytes_copied += n
            else:
                report.skipped += 1
            report.objects += 1
            if progress and (i % 200 == 0 or i + 1 == total):
                progress(phase, i + 1, total)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="snapstore-copy") as pool:
        for phase in _PHASES:  # each phase wholly written before the next begins
            todo = phases[phase]
            if todo:
                account(phase, pool.map(one, todo), len(todo))
    listed[keys.CONFIG] = len(config)
    account("config", [one(keys.CONFIG)], 1)
    return report
