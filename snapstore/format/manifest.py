"""Manifests: the log records of a run (one per checkpoint, rollback or run deletion).

Each is a small JSON document in a checksummed envelope (see :mod:`snapstore.format.codec`).
Pure functions; no I/O. See docs/format.md "Manifests".
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime

import orjson
import zstandard

from ..errors import IntegrityError, InvalidInputError, UnsupportedFormatError
from .checks import checked_int, checked_str
from .codec import (ENVELOPE_LIMITS, MAX_DEPTH, dumps_exact, loads_exact_fast, open_envelope, prepared_dict, seal_envelope,
                    zstd_decompress)
from .ids import is_id_hex, is_pack_hex, name_from_key, name_is_inline, run_digest
from .segs import decode_segs, encode_segs
from .times import format_time, parse_time
from .valuetree import ValueTree

MANIFEST_MAGIC = b"SNMF"
MANIFEST_VERSION_VALUE_TREE = 3
"""Envelope version of a manifest whose session state is a value tree (``session_state_tree``,
docs/format.md §7): a reader that does not know value trees refuses the record instead of
returning it without its session state. Other manifests keep version :data:`~snapstore.format.config.FORMAT_VERSION`."""
MANIFEST_VERSION_COMPACT = 4
"""Envelope version of every manifest this version writes (docs/format.md §11): the envelope stores
its body as ``u8 codec | data`` (codec 3: zstd with :data:`MANIFEST_DICT_V2`), and a record of a
run whose key segment is inline names its run by the short digest ``rd`` instead of the full run
id ``run`` (the run id is the one its key names). Such records may hold a value tree. A reader
that does not know version 4 refuses the record (``UnsupportedFormatError``; its envelope opens,
being stored uncompressed) instead of misreading it."""
MANIFEST_VERSION_ARRAYS = 5
"""Envelope version of every manifest this version writes: version 4's envelope and body codec,
for records whose segments may hold *array blocks* (docs/format.md §8) and whose ``messages``
may say how many of the list's messages need the exact parser (``x``, docs/format.md §11). A reader
that does not know version 5 refuses the record (``UnsupportedFormatError``) instead of taking
the packs' array blocks for damage."""
MANIFEST_VERSION_DICT3 = 6
"""Envelope version of a manifest whose body is compressed with :data:`MANIFEST_DICT_V3` (body
codec 4, docs/format.md §11): version 5 otherwise. A reader that knows only version 5 refuses such
a record (``UnsupportedFormatError``) instead of calling its body codec corrupt."""
MANIFEST_VERSION_SHARED_DICT = 7
"""Envelope version of a manifest this version writes whose segment list names a shared object
(a foreign segment whose pack id starts with ``0xff``, docs/format.md §29): version 6's envelope
and body (any body codec), for records whose own segments may hold array blocks compressed
against that shared object's message (block kind 6, docs/format.md §8). A reader that does not
know version 7 refuses the record (``UnsupportedFormatError``) instead of taking those blocks for
damage. Every other record is written with version 5 or 6."""
MANIFEST_VERSION_MAX = MANIFEST_VERSION_SHARED_DICT
"""Newest manifest envelope version this code reads."""

KIND_CHECKPOINT = "checkpoint"
KIND_ROLLBACK = "rollback"
KIND_TOMBSTONE = "tombstone"

VOID_RECORD = b"\x00"
"""A *void record* (docs/format.md §15): the 1-byte object that replaces a deleted record whose
log position must stay taken (a record younger than ``FREE_AFTER`` that a rollback, a delete or
a prune removed). Readers treat a manifest object of exactly one byte as no record at all; a
create-only write at its key fails like at any record, so a stale writer cannot take the
position again."""

VIEW_TTL = 300.0
"""Seconds a writer may act on its knowledge of a run's newest record without reading it again
(docs/format.md §20): a save, rollback or delete whose view is older re-reads the head before it
publishes, and one that took longer than this from its view to the reply of its publish checks
afterwards that no newer record exists."""

FREE_AFTER = 2 * VIEW_TTL
"""Store-time age (seconds) a log record must have before a rollback, delete or prune may free its
position by deleting it; a younger one is replaced by :data:`VOID_RECORD` instead (docs/format.md
§15). GC deletes void records (and hidden records) only once older than this and its grace
period."""


def is_void(size: int) -> bool:
    """True if a manifest object of ``size`` bytes is a void record (exactly 1 byte)."""
    return size == len(VOID_RECORD)


def record_positions(infos) -> list[int]:
    """The log positions of listed manifest objects (``ObjectInfo``s of ``runs/<R>/m/`` keys, in
    listing order) that hold records: void records left out. Every key is parsed, so a stray name
    still raises IntegrityError (:func:`snapstore.format.keys.seq_from_manifest_key`)."""
    from .keys import seq_from_manifest_key
    return [s for i in infos for s in [seq_from_manifest_key(i.key)] if not is_void(i.size)]

MANIFEST_DICT_V1 = (
    b'{"kind":"rollback","run":"","seq":1,"write_id":"","created":"2026-01-01T00:00:00.000000Z",'
    b'"target":{"seq":1,"id":""}}'
    b'{"kind":"checkpoint","run":"","seq":1,"write_id":"","created":"2026-01-01T00:00:00.000000Z",'
    b'"id":"","parent":"","step":1,"token_usage":{"input_tokens":1,"output_tokens":1,"total_tokens":1,'
    b'"prompt_tokens":1,"completion_tokens":1,"cache_read_input_tokens":0},"metrics":{},'
    b'"agent_id":"","status":"","metadata":{},"session_state":{},'
    b'"messages":{"count":1,"bytes":1,"digest":"","state":["",""]}}'
)
"""Raw-content zstd dictionary for manifests (envelope compression 2). Part of format version 1:
never change these bytes; a new dictionary needs a new constant and compression code."""

MANIFEST_DICT_V2 = (
    b'{"kind":"tombstone","rd":"","seq":1,"write_id":"","created":"2026-01-01T00:00:00.000000Z"}'
    b'{"kind":"rollback","rd":"","seq":1,"write_id":"","created":"2026-01-01T00:00:00.000000Z",'
    b'"target":{"seq":1,"id":""},"segs":""}'
    b'{"kind":"checkpoint","run":"","seq":1,"write_id":"","created":"2026-01-01T00:00:00.000000Z",'
    b'"id":"","parent":"","step":1,"agent_id":"","status":"running","token_usage":{"input_tokens":1,'
    b'"output_tokens":1,"total_tokens":1,"prompt_tokens":1,"completion_tokens":1,"cache_read_input_tokens":0,'
    b'"cache_creation_input_tokens":0},"metrics":{"latency_s":1.0},"metadata":{},"session_state":{},'
    b'"session_state_tree":["",1,0,"",""],"messages":{"count":1,"bytes":1,"digest":"","state":["",""]},'
    b'"origin":{"run":"","id":""},"segs":""}'
    b'{"kind":"checkpoint","rd":"","seq":1,"write_id":"","created":"2026-01-01T00:00:00.000000Z",'
    b'"id":"","parent":"","metadata":{"lg":"w","for":"","task":"","path":"~__pregel_pull, model",'
    b'"chs":["messages"]},"session_state":{"off":0,"w":[["messages",0,"ml",0,1]],"blobs":[]},'
    b'"messages":{"count":1,"bytes":1,"digest":"","state":["",""]},"segs":""}'
    b'{"kind":"checkpoint","rd":"","seq":1,"write_id":"","created":"2026-01-01T00:00:00.000000Z",'
    b'"id":"","parent":"","step":1,"metadata":{"lg":"c","id":"","parent":"","chs":["messages"],'
    b'"md":{"source":"loop","step":1,"parents":{},"counters_since_delta_snapshot":{"messages":[1,1]}}},'
    b'"session_state":{"cp":{"json":{"v":4,"ts":"2026-01-01T00:00:00.000000+00:00","channel_versions":'
    b'{"__start__":1,"messages":1,"branch:to:model":1},"versions_seen":{"__input__":{},"__start__":'
    b'{"__start__":1},"model":{"branch:to:model":1}},"updated_channels":["messages"]}},'
    b'"layout":[["messages","s",0,1]],"nlead":0},"messages":{"count":1,"bytes":1,"digest":"",'
    b'"state":["",""]},"segs":""}'
)
"""Raw-content zstd dictionary of version-4 manifests (body codec 3, docs/format.md §11): the
record shapes this version writes, the compact ``rd`` form, a CheckpointManager checkpoint with the
usual user fields, and the two records SnapstoreSaver writes (a LangGraph checkpoint and its
pending writes). Part of manifest version 4: never change these bytes; a new dictionary needs a
new codec. Only the compression ratio depends on it (a record of any shape decodes)."""

MANIFEST_DICT_V3 = MANIFEST_DICT_V2 + (
    b'{"kind":"checkpoint","rd":"","seq":1,"write_id":"","created":"2026-01-01T00:00:00.000000Z","id":""'
    b',"parent":null,"metadata":{"lgns":1},"session_state":{"lgns":[""]},"messages":{"count":0,"bytes":0'
    b',"digest":"","state":null,"x":0,"a":1,"xt":""},"segs":""}{"kind":"checkpoint","rd":"","seq":1,"wri'
    b'te_id":"","created":"2026-01-01T00:00:00.000000Z","id":"","parent":"","step":32,"metadata":{"lg":"'
    b'C","id":"","parent":"","chs":["__start__"],"md":{"source":"input","step":32,"parents":{},"counters'
    b'_since_delta_snapshot":{"messages":[22,34]}},"snapstore.needs":{"from":0,"by":"LangGraph checkpoin'
    b't and DeltaChannel delta chain"}},"session_state":{"v":2,"k":1,"layout":[["__start__","d",44,2]],"'
    b'meta":46,"hist":{"messages":[0,44]}},"messages":{"count":47,"bytes":14057,"digest":"","state":["",'
    b'""],"x":0,"a":0,"xt":""},"segs":""}{"kind":"checkpoint","rd":"","seq":1,"write_id":"","created":"2'
    b'026-01-01T00:00:00.000000Z","id":"","parent":"","metadata":{"lg":"W","for":"","chs":["branch:to:mo'
    b'del","messages"],"cpos":55,"snapstore.needs":{"from":0,"by":"LangGraph checkpoint and DeltaChannel'
    b' delta chain"},"cfrom":0},"session_state":{"v":2,"cf":"","c":{"v":2,"k":1,"layout":[["__start__","'
    b'd",44,2]],"meta":46,"hist":{"messages":[0,44]}},"cn":47,"w":[["","~__pregel_pull, __start__","mess'
    b'ages",0,"m",47,1],["","~__pregel_pull, __start__","branch:to:model",1,"b",48,1]]},"messages":{"cou'
    b'nt":49,"bytes":14596,"digest":"","state":["","",""],"x":0,"a":0,"xt":""},"segs":""}{"kind":"checkp'
    b'oint","rd":"","seq":1,"write_id":"","created":"2026-01-01T00:00:00.000000Z","id":"","parent":"","m'
    b'etadata":{"lg":"W","for":"","chs":["messages"],"cpos":55,"snapstore.needs":{"from":0,"by":"LangGra'
    b'ph checkpoint and DeltaChannel delta chain"},"cfrom":0},"session_state":{"v":2,"cf":"","c":{"v":2,'
    b'"k":1,"layout":[["__start__","d",44,2]],"meta":46,"hist":{"messages":[0,44]}},"cn":47,"w":[["","~_'
    b'_pregel_pull, __start__","messages",0,"m",47,1],["","~__pregel_pull, __start__","branch:to:model",'
    b'1,"b",48,1]],"ef":"","e":[["","~__pregel_pull, model","messages",0,"m",49,1]]},"messages":{"count"'
    b':50,"bytes":15166,"digest":"","state":["","",""],"x":0,"a":0,"xt":""},"segs":""}{"kind":"checkpoin'
    b't","rd":"","seq":1,"write_id":"","created":"2026-01-01T00:00:00.000000Z","id":"","parent":"","step'
    b'":33,"metadata":{"lg":"C","id":"","parent":"","chs":["branch:to:model"],"md":{"source":"loop","ste'
    b'p":33,"parents":{},"counters_since_delta_snapshot":{"messages":[23,35]}},"wch":["messages"],"snaps'
    b'tore.needs":{"from":0,"by":"LangGraph checkpoint and DeltaChannel delta chain"}},"session_state":{'
    b'"v":2,"k":1,"layout":[["branch:to:model","b",46,1]],"meta":47,"hist":{"messages":[0,46]},"w":[["",'
    b'"~__pregel_pull, model","messages",0,"m",48,1]]},"messages":{"count":49,"bytes":14728,"digest":"",'
    b'"state":["",""],"x":0,"a":0,"xt":""},"segs":""}{"kind":"checkpoint","rd":"","seq":1,"write_id":"",'
    b'"created":"2026-01-01T00:00:00.000000Z","id":"","parent":"","step":34,"metadata":{"lg":"C","id":""'
    b',"parent":"","chs":[],"md":{"source":"loop","step":34,"parents":{},"counters_since_delta_snapshot"'
    b':{"messages":[24,36]}},"snapstore.needs":{"from":0,"by":"LangGraph checkpoint and DeltaChannel del'
    b'ta chain"}},"session_state":{"v":2,"k":1,"layout":[],"meta":48,"hist":{"messages":[0,48]}},"messag'
    b'es":{"count":49,"bytes":14739,"digest":"","state":["","",""],"x":0,"a":0,"xt":""},"segs":""}'
)
"""Raw-content zstd dictionary of body codec 4 (manifest version 6, docs/format.md §11): the
bytes of :data:`MANIFEST_DICT_V2`, then the records SnapstoreSaver writes in layout ``v`` 2 (docs/langgraph-layout.md §3-§4: a namespace
registry record, a LangGraph input checkpoint, the writes record of its ``__start__`` task, a
writes record with writes for a checkpoint to come, a loop checkpoint carrying writes and one
without), ids and digests blanked, as ``benchmarks/langgraph_saver_bytes.py``'s chat graph
writes them. Part of manifest version 6: never change these bytes. Only the ratio depends on it."""

_BODY_RAW, _BODY_ZSTD, _BODY_DICT1, _BODY_DICT2, _BODY_DICT3 = 0, 1, 2, 3, 4
_ZD1 = prepared_dict(MANIFEST_DICT_V1)  # prepared once per process: each thread reuses one decompressor
_ZD2 = prepared_dict(MANIFEST_DICT_V2)
_ZD3 = prepared_dict(MANIFEST_DICT_V3)
_BODY_DICTS = {_BODY_DICT1: _ZD1, _BODY_DICT2: _ZD2, _BODY_DICT3: _ZD3}
_SAVER_MARK = b',"metadata":{"lg":"'
"""What a record of SnapstoreSaver's layout holds (its metadata field starts with the record
kind): such a record is compressed with :data:`MANIFEST_DICT_V3`, others with ``V2``."""


def _compress_body(body: bytes) -> tuple[int, bytes]:
    """``(envelope version, stored body)`` of a manifest body: ``u8 codec | data`` with the
    smallest of codec 0 (``data`` is the JSON), 1 (one zstd frame) and one dictionary codec: 4 (one
    zstd frame with :data:`MANIFEST_DICT_V3`, version 6) for a record whose metadata has an ``"lg"``
    first (SnapstoreSaver's layout), else 3 (:data:`MANIFEST_DICT_V2`, version 5); codec 2
    (:data:`MANIFEST_DICT_V1`) is read, not written."""
    codec_d, zd = (_BODY_DICT3, _ZD3) if _SAVER_MARK in body else (_BODY_DICT2, _ZD2)
    options = [(_BODY_RAW, body), (_BODY_ZSTD, zstandard.ZstdCompressor(level=19, write_checksum=False).compress(body)),
               (codec_d, zstandard.ZstdCompressor(level=19, dict_data=zd, write_checksum=False,
                                                  write_dict_id=False).compress(body))]
    codec, data = min(options, key=lambda o: len(o[1]))
    return (MANIFEST_VERSION_DICT3 if codec == _BODY_DICT3 else MANIFEST_VERSION_ARRAYS), bytes([codec]) + data


def _decompress_body(key: str, stored: bytes, version: int = MANIFEST_VERSION_MAX) -> bytes:
    """Inverse of :func:`_compress_body` for a record of envelope ``version`` (codec 4 only in
    version 6 and later), bounded by :data:`MAX_MANIFEST_BODY`. Raises IntegrityError."""
    if not stored:
        raise IntegrityError(key, "empty manifest body")
    codec, data = stored[0], stored[1:]
    if codec == _BODY_RAW:
        if len(data) > MAX_MANIFEST_BODY:
            raise IntegrityError(key, f"manifest body of {len(data)} bytes exceeds the limit {MAX_MANIFEST_BODY}")
        return data
    if codec not in (_BODY_ZSTD, _BODY_DICT1, _BODY_DICT2, _BODY_DICT3) or (
            codec == _BODY_DICT3 and version < MANIFEST_VERSION_DICT3):
        raise IntegrityError(key, f"unknown manifest body codec {codec} (envelope version {version})")
    return zstd_decompress(key, data, MAX_MANIFEST_BODY, _BODY_DICTS.get(codec), what="manifest body")


USER_FIELDS = ("step", "agent_id", "status", "token_usage", "metrics", "metadata")

MAX_MANIFEST_BODY = ENVELOPE_LIMITS[MANIFEST_MAGIC]
"""Largest JSON body of a manifest (bytes): writers refuse a save whose record would be larger
(:func:`check_record_size`), readers refuse a larger body without decompressing past it."""


def check_record_size(fields: dict, session_state_bytes: int = 0) -> None:
    """Refuse user fields that would make a manifest larger than :data:`MAX_MANIFEST_BODY`.

    Args:
        fields: the user fields (step, agent_id, status, token_usage, metrics, metadata), already
            validated as JSON values.
        session_state_bytes: bytes of an inline session state (JSON), if any.
    Raises:
        InvalidInputError: the record would exceed the limit; nothing was written.
    """
    total = session_state_bytes
    for k, v in fields.items():
        if v is not None:
            try:
                total += len(orjson.dumps(v))
            except TypeError:  # big integers, lone surrogates: the exact encoder
                total += len(dumps_exact(v))
    if total > MAX_MANIFEST_BODY - 64 * 1024:
        raise InvalidInputError(f"checkpoint fields and inline session state take {total} bytes; a manifest "
                                f"holds at most {MAX_MANIFEST_BODY - 64 * 1024} (store large values in messages)")


def _check_state(v) -> list | None:
    """``messages.state``: None, or [state id hex, state pack hex(, upper pack hex)]."""
    if v is None:
        return None
    if (not isinstance(v, list) or not 2 <= len(v) <= 3 or not is_id_hex(v[0])
            or not all(is_pack_hex(h) for h in v[1:])):
        raise ValueError("messages.state is not [id hex, pack hex(, pack hex)]")
    return v


def _check_state_ref(v) -> list | None:
    """``session_state_ref``: None, or [id hex, pack hex, size, flags]."""
    if v is None:
        return None
    if (not isinstance(v, list) or len(v) != 4 or not is_id_hex(v[0]) or not is_pack_hex(v[1])
            or type(v[2]) is not int or v[2] < 0 or type(v[3]) is not int or not 0 <= v[3] <= 3):
        raise ValueError("session_state_ref is not [id hex, pack hex, size, flags]")
    return v


def _run_of(key: str, version: int, d: dict, run_id: str | None) -> str:
    """The run id of record ``d``: its ``run``, or for a compact record (``rd``, version 4) the run
    ``run_id`` or ``key`` names, checked against the digest. Raises ValueError, KeyError."""
    if "run" in d:
        if "rd" in d:
            raise ValueError("both run and rd")
        return checked_str(d["run"], "run")
    rd = checked_str(d["rd"], "rd")
    if version < MANIFEST_VERSION_COMPACT:
        raise ValueError(f"rd in a record of version {version}")
    if run_id is None:
        parts = key.split("/")
        run_id = name_from_key(parts[1]) if len(parts) >= 4 and parts[0] == "runs" else None
        if run_id is None:
            raise ValueError("the record names its run by digest only and is not read under a run's key")
    if run_digest(run_id) != rd:
        raise ValueError(f"rd {rd[:16]!r} is not the digest of run {run_id[:80]!r} (a record of another run)")
    return run_id


@dataclass(slots=True)
class Manifest:
    """One record in a run's log (see docs/format.md).

    Attributes:
        kind: ``checkpoint``, ``rollback`` (head moves back to ``target``) or ``tombstone`` (run deleted).
        run_id: the full run id.
        seq: position in the run's log (never reused).
        write_id: random id of the writer's attempt (recognises one's own write after a lost reply).
        created: UTC creation time (writer's clock; used by retention policies).
        checkpoint_id / parent_id: the checkpoint's id and its parent's (None for the first).
        fields: user fields (step, agent_id, status, token_usage, metrics, metadata).
        session_state: inline session state (when small), else None.
        session_state_ref: ``[id hex, pack hex, size, flags]`` of a large session state stored as one
            chunk or pieces entry (written by earlier versions; read, never written), else None.
        session_state_tree: a large session state stored as a value tree
            (:class:`~snapstore.format.valuetree.ValueTree`, docs/format.md §7), else None.
        has_session_state: whether a session state was given at all.
        count / size: messages in the list and their uncompressed JSON bytes.
        digest: hex keyed blake3 of the concatenated message ids (prefix checks without reading).
        state: ``[state id hex, pack hex]`` of the list's spine; None for an empty list.
        exact: how many of the list's messages carry the EXACT flag (need the exact parser,
            docs/format.md §6); None when the writer did not know (records before version 5).
        exact_tag: keyed tag of ``exact``, ``arrays`` and the digest (:meth:`Hasher.exact_tag`,
            ``messages.xt``); a reader of array blocks believes ``exact`` and ``arrays`` only when
            it matches.
        arrays: ``messages.a``: 1 when the writer knew that the run's array blocks held exactly
            this list when it saved it (their first ``count`` items, and no more), 0 when it knew
            they did not; None for records without it (docs/format.md §11, §19).
        target: for rollback records, ``{"seq": k, "id": checkpoint id}``.
        origin: for the first checkpoint of a fork, ``{"run": source run id, "id": source checkpoint id}``.
        segs: format 2: the run's segment list (:class:`snapstore.format.segs.Seg`), on checkpoint
            and rollback records; None for format-1 records and tombstones (and for light reads,
            which keep the encoded list in ``segs_text``; use :meth:`segment_list`).
    """

    kind: str
    run_id: str
    seq: int
    write_id: str
    created: datetime
    checkpoint_id: str | None = None
    parent_id: str | None = None
    fields: dict = field(default_factory=dict)
    session_state: object = None
    session_state_ref: list | None = None
    session_state_tree: ValueTree | None = None
    has_session_state: bool = False
    count: int = 0
    size: int = 0
    digest: str = ""
    state: list | None = None
    exact: int | None = None
    exact_tag: str | None = None
    arrays: int | None = None
    target: dict | None = None
    origin: dict | None = None
    segs: list | None = None
    segs_text: str | None = None

    def segment_list(self) -> list:
        """The record's segments (decoding ``segs_text`` of a light read); [] when it has none.

        Raises:
            IntegrityError: the stored list is malformed.
        """
        if self.segs is not None:
            return self.segs
        if self.segs_text is None:
            return []
        return decode_segs(f"manifest of run {self.run_id!r} position {self.seq}", self.segs_text)

    def to_bytes(self) -> bytes:
        """Encode as an ``SNMF`` envelope around JSON."""
        compact = name_is_inline(self.run_id)
        d = {"kind": self.kind}
        if compact:  # the key names the run; the digest checks the record is under the right one
            d["rd"] = run_digest(self.run_id)
        else:
            d["run"] = self.run_id
        d.update(seq=self.seq, write_id=self.write_id, created=format_time(self.created))
        if self.kind == KIND_CHECKPOINT:
            d["id"] = self.checkpoint_id
            d["parent"] = self.parent_id
            for k in USER_FIELDS:
                if self.fields.get(k) is not None:
                    d[k] = self.fields[k]
            if self.session_state_tree is not None:
                d["session_state_tree"] = self.session_state_tree.to_json()
            elif self.session_state_ref is not None:
                d["session_state_ref"] = self.session_state_ref
            elif self.has_session_state:
                d["session_state"] = self.session_state
            d["messages"] = {"count": self.count, "bytes": self.size, "digest": self.digest, "state": self.state}
            if self.exact is not None:
                d["messages"]["x"] = self.exact
                if self.arrays is not None:
                    d["messages"]["a"] = self.arrays
                if self.exact_tag is not None:
                    d["messages"]["xt"] = self.exact_tag
            if self.origin is not None:
                d["origin"] = self.origin
        elif self.kind == KIND_ROLLBACK:
            d["target"] = self.target
        if self.segs is not None and self.kind != KIND_TOMBSTONE:
            d["segs"] = encode_segs(self.segs)
        version, stored = _compress_body(dumps_exact(d))
        if self.segs and self.kind != KIND_TOMBSTONE and \
                any(s.foreign and s.pack[:1] == b"\xff" for s in self.segs):
            version = MANIFEST_VERSION_SHARED_DICT
        return seal_envelope(MANIFEST_MAGIC, version, stored, compress=False)

    @classmethod
    def from_bytes(cls, key: str, data: bytes, light: bool = False, run_id: str | None = None) -> "Manifest":
        """Decode and verify. ``light``: drop the user fields and an inline session state (what
        garbage collection does not need; saves memory when every manifest is held at once).
        ``run_id``: the run the record is read as belonging to, for a compact record (version 4,
        which names its run only by digest); None: the run ``key`` names (``runs/<R>/...``).

        Raises:
            IntegrityError: corrupt or malformed (names ``key``).
            UnsupportedFormatError: written by a newer format version.
        """
        version, body = open_manifest(key, data)
        return cls.from_body(key, version, body, light, run_id)

    @classmethod
    def from_body(cls, key: str, version: int, body: bytes, light: bool = False,
                  run_id: str | None = None, fill=None, where=None) -> "Manifest":
        """Decode a manifest from its envelope ``version`` and its JSON ``body`` (what the envelope
        holds after decompression; a log segment of version 3 stores records so, docs/format.md §12).
        ``light`` and ``run_id`` as in :meth:`from_bytes`.

        ``fill``: the body is *thin* (a record of a thin bundle log, docs/format.md §28): it lacks
        ``messages.digest``, ``messages.state``, ``messages.xt`` and ``segs``, and ``fill()``
        returns ``(key, {name: value})`` of those (:mod:`snapstore.format.archfields`), called the
        first time one of them is used; the result is an :class:`ArchivedManifest`. ``where``:
        what identifies the place ``fill`` reads (two unloaded records of the same place and equal
        otherwise are equal without loading).

        Raises:
            IntegrityError: malformed (names ``key``); a body over :data:`MAX_MANIFEST_BODY` bytes.
            UnsupportedFormatError: written by a newer format version.
        """
        if version > MANIFEST_VERSION_MAX:
            raise UnsupportedFormatError(f"{key}: manifest format {version} is newer than supported {MANIFEST_VERSION_MAX}")
        if version < 1:
            raise IntegrityError(key, f"invalid manifest format version {version}")
        if len(body) > MAX_MANIFEST_BODY:
            raise IntegrityError(key, f"manifest body of {len(body)} bytes exceeds the limit {MAX_MANIFEST_BODY}")
        try:
            d = loads_exact_fast(body, MAX_DEPTH + 1)  # user fields sit one level below the record
            if not isinstance(d, dict):
                raise ValueError("not a JSON object")
            kind = d["kind"]
            thin = fill is not None
            m = (ArchivedManifest if thin else cls)(kind=kind, run_id=_run_of(key, version, d, run_id), seq=checked_int(d["seq"], "seq"),
                    write_id=checked_str(d["write_id"], "write_id", empty=True), created=parse_time(checked_str(d["created"], "created")))
            if kind == KIND_CHECKPOINT:
                m.checkpoint_id = checked_str(d["id"], "id")
                m.parent_id = d.get("parent")
                if m.parent_id is not None:
                    checked_str(m.parent_id, "parent")
                m.fields = {} if light else {k: d.get(k) for k in USER_FIELDS}
                m.session_state_ref = _check_state_ref(d.get("session_state_ref"))
                if "session_state_tree" in d:
                    m.session_state_tree = ValueTree.from_json(d["session_state_tree"])
                m.has_session_state = ("session_state" in d or m.session_state_ref is not None
                                       or m.session_state_tree is not None)
                m.session_state = None if light else d.get("session_state")
                msgs = d["messages"]
                if not isinstance(msgs, dict):
                    raise ValueError("messages is not an object")
                m.count, m.size = checked_int(msgs["count"], "messages.count"), checked_int(msgs["bytes"], "messages.bytes")
                if not thin:
                    m.digest = checked_str(msgs["digest"], "messages.digest", empty=True)
                    m.state = _check_state(msgs["state"])
                if "x" in msgs:
                    m.exact = checked_int(msgs["x"], "messages.x")
                    if m.exact > m.count:
                        raise ValueError(f"messages.x {m.exact} exceeds messages.count {m.count}")
                    if "a" in msgs:
                        m.arrays = checked_int(msgs["a"], "messages.a")
                        if m.arrays > 1:
                            raise ValueError(f"messages.a is {m.arrays}, not 0 or 1")
                    if "xt" in msgs and not thin:
                        m.exact_tag = checked_str(msgs["xt"], "messages.xt")
                m.origin = d.get("origin")
                if m.origin is not None and not (isinstance(m.origin, dict) and isinstance(m.origin.get("run"), str)
                                                 and isinstance(m.origin.get("id"), str)):
                    raise ValueError("origin is not {run, id}")
            elif kind == KIND_ROLLBACK:
                m.target = d["target"]
                if not isinstance(m.target, dict):
                    raise ValueError("target is not an object")
                checked_int(m.target["seq"], "target.seq")
                checked_str(m.target["id"], "target.id")
            elif kind != KIND_TOMBSTONE:
                raise ValueError(f"unknown kind {kind!r}")
            if thin:
                if "segs" in d or any(k in d.get("messages", ()) for k in ("digest", "state", "xt")):
                    raise ValueError("a thin record holding a moved field")
                m._arm(fill, light, where)
            elif "segs" in d and kind != KIND_TOMBSTONE:
                if light:
                    if not isinstance(d["segs"], str):
                        raise ValueError("segs is not a string")
                    m.segs_text = d["segs"]
                else:
                    m.segs = decode_segs(key, d["segs"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as e:
            raise IntegrityError(key, f"malformed manifest: {e}") from None
        return m

    def equal_unloaded(self, other: "Manifest") -> bool:
        """True if ``other`` equals this record in every field but the ones an archived record
        (:class:`ArchivedManifest`) moves to its bundle (``digest``,
        ``state``, ``exact_tag``, ``segs``/``segs_text``), which are not read: what can be checked
        of an archived record without reading its bundle (``verify`` of a cold bundle compares a
        run's log segment copies so; ``verify --read-data`` reads the moved fields).

        Args:
            other: any :class:`Manifest` (its moved fields are not read either).
        Returns:
            bool.
        """
        return all(getattr(self, n) == getattr(other, n) for n in _FIELDS if n not in _LAZY)


_LAZY = ("digest", "state", "exact_tag", "segs", "segs_text")
"""The fields of an :class:`ArchivedManifest` read from its bundle when first used."""


def _lazy(name: str) -> property:
    base = Manifest.__dict__[name]  # the slot of Manifest

    def get(self):
        if getattr(self, "_fill", None) is not None:  # not yet read from the bundle
            self._load()
        return base.__get__(self)

    def put(self, value):
        if getattr(self, "_fill", None) is not None:
            self._load()
        base.__set__(self, value)
    return property(get, put, doc=f"``{name}`` (read from the record's bundle when first used)")


class ArchivedManifest(Manifest):
    """A record read from a thin bundle log (docs/format.md §28): a :class:`Manifest` whose
    data-locating fields (``digest``, ``state``, ``exact_tag``, ``segs``/``segs_text``) are in the
    fields entry of its archive bundle, read when one of them is first used (a ranged read of the
    bundle, which a reader of the checkpoint's data reads anyway; for a bundle in ``GLACIER`` or
    ``DEEP_ARCHIVE`` not restored, :class:`~snapstore.errors.ColdObjectError`). Everything else
    (kind, position, ids, times, user fields, counts) is there at once, so listing, retention and
    GC's mark of archived runs never read the bundle. Built by :meth:`Manifest.from_body` with
    ``fill``.

    Raises (on first use of a moved field):
        IntegrityError: the bundle holds no valid fields for this record (names the bundle).
        ColdObjectError / ObjectNotFound / StoreError: the bundle cannot be read.
    """

    __slots__ = ("_fill", "_light", "_where")

    def _arm(self, fill, light: bool, where) -> None:
        self._fill, self._light, self._where = fill, light, where

    @property
    def loaded(self) -> bool:
        """True once the moved fields are read (or when they never were moved)."""
        return getattr(self, "_fill", None) is None

    def _load(self) -> None:
        key, moved = self._fill()
        S = Manifest.__dict__
        try:
            if not isinstance(moved, dict):
                raise ValueError("not an object")
            if self.kind == KIND_CHECKPOINT:
                S["digest"].__set__(self, checked_str(moved["digest"], "messages.digest", empty=True))
                S["state"].__set__(self, _check_state(moved["state"]))
                if "xt" in moved:
                    if self.exact is None:
                        raise ValueError("messages.xt without messages.x")
                    S["exact_tag"].__set__(self, checked_str(moved["xt"], "messages.xt"))
            elif any(k in moved for k in ("digest", "state", "xt")):
                raise ValueError(f"messages fields for a {self.kind} record")
            if "segs" in moved and self.kind != KIND_TOMBSTONE:
                if self._light:
                    if not isinstance(moved["segs"], str):
                        raise ValueError("segs is not a string")
                    S["segs_text"].__set__(self, moved["segs"])
                else:
                    S["segs"].__set__(self, decode_segs(key, moved["segs"]))
        except (ValueError, KeyError, TypeError) as e:
            raise IntegrityError(key, f"the moved fields of run {self.run_id!r} position {self.seq} are "
                                      f"malformed: {e}") from None
        self._fill = None

    def __eq__(self, other):
        if not isinstance(other, Manifest):
            return NotImplemented
        if (isinstance(other, ArchivedManifest) and not self.loaded and not other.loaded
                and self._where is not None and self._where == other._where):
            return self.equal_unloaded(other)
        return all(getattr(self, n) == getattr(other, n) for n in _FIELDS)

    __hash__ = None

    def __repr__(self) -> str:
        if self.loaded:
            return Manifest.__repr__(self)
        return (f"ArchivedManifest(kind={self.kind!r}, run_id={self.run_id!r}, seq={self.seq}, "
                f"checkpoint_id={self.checkpoint_id!r}, moved fields in {self._where!r})")


for _n in _LAZY:
    setattr(ArchivedManifest, _n, _lazy(_n))
_FIELDS = tuple(f.name for f in fields(Manifest))


def open_manifest(key: str, data: bytes) -> tuple[int, bytes]:
    """Verify a manifest object's envelope and return ``(envelope version, JSON body)``, the form a
    log segment of version 3 stores (docs/format.md §12); :meth:`Manifest.from_body` decodes it.

    Raises:
        IntegrityError: wrong magic, bad checksum, undecodable or too large body (names ``key``).
    """
    version, body = open_envelope(key, MANIFEST_MAGIC, data, _ZD1)
    if version >= MANIFEST_VERSION_COMPACT and version <= MANIFEST_VERSION_MAX:
        body = _decompress_body(key, body, version)
    return version, body
