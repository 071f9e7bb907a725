"""The repository config (key ``config``, docs/format.md "Config"): the format version, the
repository's id and content key, and its settings with their allowed ranges.

Pure functions; no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from ..errors import IntegrityError, RepositoryError, UnsupportedFormatError
from .checks import checked_int, checked_str
from .codec import loads_exact_fast, open_envelope, seal_envelope
from .times import format_time, parse_time

CONFIG_MAGIC = b"SNCF"
FORMAT_VERSION = 2
"""Newest format this code reads and the one it writes (2: segment lists, docs/format.md §10).
Format 1 objects are read as they are."""


MAX_CHUNK = 64 << 20
"""Largest chunk (bytes) a writer may store (``cdc_max``, ``cdc_threshold``): bounds what a reader
decompresses for one entry."""

NEW_SEG_FANOUT = 4
"""``seg_fanout`` of a repository this version creates (as earlier releases). ``seg_fanout=16`` (a
setting at ``init``) has about half the levels of fanout 4 (log_16 n against log_4 n), so about
half the tier bytes PUT on long runs (``python benchmarks/write_amp.py``: 3.50x against 5.01x at
10,000 saves on S3), but a run keeps up to 15 small per-save packs before its first merge instead
of 3, each compressed alone: the shared runs stored 14-36% more bytes
(``python -m benchmarks --workloads traj: --systems snapstore-local --quick``), so it is not the
default (docs/format.md §10 "Fanout")."""

SETTING_RANGES = {
    "level": (1, 22),                    # zstd levels
    "dict_bytes": (0, 8 << 20),          # 0: no dictionaries
    "cdc_threshold": (64, MAX_CHUNK),
    "cdc_min": (64, MAX_CHUNK),          # FastCDC's own minimums: 64 / 256 / 1024 bytes
    "cdc_avg": (256, MAX_CHUNK),
    "cdc_max": (1024, MAX_CHUNK),
    "leaf_bits": (1, 12),
    "node_bits": (1, 12),
    "max_items": (2, 4096),
    "inline_state_max": (0, 1 << 20),
    "seg_fanout": (0, 64),               # 0: segments off; 1 is refused below
    "seg_limit": (0, 96),                # 0: the counter; else at most this many own segments (>= 4)
    "seg_from": (0, 35),                 # with seg_limit: the counter until an own segment of this level
    "removals": (0, 1),                  # 1: every removal of log records is recorded (§16)
}
"""Allowed range (inclusive) of every repository setting, checked when a repository is created
and every time its config is read (docs/format.md §5)."""


def check_settings(values: dict) -> str | None:
    """Return why the repository settings ``values`` (name -> value) are out of range, or None.

    Checks each value's type (``int``) and range (:data:`SETTING_RANGES`), and that
    ``cdc_min <= cdc_avg <= cdc_max`` and ``seg_fanout`` is 0 or at least 2.
    """
    for k, v in values.items():
        lo, hi = SETTING_RANGES[k]
        if type(v) is not int or not lo <= v <= hi:
            return f"setting {k} must be an integer in [{lo}, {hi}], got {str(v)[:40]!r}"
    mn, avg, mx = (values.get(k, d) for k, d in (("cdc_min", 16384), ("cdc_avg", 65536), ("cdc_max", 262144)))
    if not mn <= avg <= mx:
        return f"chunk sizes must satisfy cdc_min <= cdc_avg <= cdc_max, got {mn}, {avg}, {mx}"
    if values.get("seg_fanout") == 1:
        return "setting seg_fanout must be 0 (no segments) or 2-64, got 1"
    if values.get("seg_limit", 0) in (1, 2, 3):
        return f"setting seg_limit must be 0 (the counter) or 4-96, got {values['seg_limit']}"
    start, limit, fanout = values.get("seg_from", 0), values.get("seg_limit", 0), values.get("seg_fanout", 4)
    if start and limit < (fanout - 1) * start + 1:
        # the counter lists up to fanout - 1 segments of each level below seg_from, and one of
        # level seg_from when it makes it: the bounded lists after it start within the limit
        return (f"setting seg_from {start} needs seg_limit at least (seg_fanout - 1) x seg_from + 1 = "
                f"{(fanout - 1) * start + 1} (bounded lists), got {limit}")
    return None


@dataclass
class RepoConfig:
    """Repository settings, fixed at creation (stored at key ``config``).

    Attributes:
        repo_id: random hex id of the repository.
        key: 32-byte key for keyed blake3 content ids.
        created: creation time (UTC).
        level: zstd level for packs.
        dict_bytes: size of the raw-content dictionary (bytes of preceding messages) for data blocks;
            0 disables dictionaries.
        cdc_threshold / cdc_min / cdc_avg / cdc_max: messages longer than ``cdc_threshold`` bytes
            are split with FastCDC into pieces of min/avg/max bytes.
        leaf_bits / node_bits / max_items: the message tree's shape.
        inline_state_max: session states whose JSON exceeds this many bytes are stored as chunks.
        seg_fanout: format 2: how many segments of one level a writer merges into one of the next
            level (2-64; a format-1 config has none and gets the default). 0 turns segments off:
            records carry no segment list and every save's pack stays where its hints name it
            (format-1 writes; for tests of format-1 behaviour and comparisons).
        seg_limit: format 2: 0 (absent: every config before this setting) merges segments by the
            counter of ``seg_fanout``; 4-96 keeps at most that many own segments per record,
            merging a suffix only when the list is full (docs/format.md §10, *Bounded lists*).
            Writers that do not know the setting use the counter on the same lists.
        seg_from: format 2, with ``seg_limit``: 0 (absent) bounds lists from a run's first save; L
            >= 1 merges by the counter of ``seg_fanout`` while the list holds no own segment of
            level L or more, and by bounded lists after (docs/format.md §10, *Bounded after a
            level*): short runs keep the counter's packs, long runs its few rewrites. Writers that
            do not know the setting bound lists from the start (or use the counter).
        removals: 1 if every writer of this repository records the log positions it removes
            (removal records, docs/format.md §16): set when a repository is created by this
            version; absent (0) in older ones. With 1, ``verify`` reports a gap in a run's log that
            no removal record names as a missing manifest (an error); with 0 it reports no gap
            (an earlier version removed records without saying so).
    """

    repo_id: str
    key: bytes
    created: datetime
    version: int = FORMAT_VERSION
    level: int = 3
    dict_bytes: int = 131072
    cdc_threshold: int = 65536
    cdc_min: int = 16384
    cdc_avg: int = 65536
    cdc_max: int = 262144
    leaf_bits: int = 3
    node_bits: int = 3
    max_items: int = 64
    inline_state_max: int = 4096
    seg_fanout: int = 4
    """4 when a config does not say (format 1, and the default of earlier releases);
    :data:`NEW_SEG_FANOUT` in repositories this version creates."""
    seg_limit: int = 0
    seg_from: int = 0
    removals: int = 0
    encryption: dict | None = None
    """The ``encryption`` section (:mod:`snapstore.format.keyslots`, docs/format.md §27) of an
    encrypted repository, else None. Its config stores no ``key``: ``key`` is then derived from
    the data key a slot opens, and is empty until the repository is unlocked."""

    SETTINGS = ("level", "dict_bytes", "cdc_threshold", "cdc_min", "cdc_avg", "cdc_max", "leaf_bits",
                 "node_bits", "max_items", "inline_state_max", "seg_fanout", "seg_limit", "seg_from",
                "removals")
    """The names of the repository's settings (the config's fields a user may choose at ``init``)."""

    def to_bytes(self) -> bytes:
        """Encode as an ``SNCF`` envelope around JSON."""
        d = {"format": "snapstore", "version": self.version, "repo_id": self.repo_id, "key": self.key.hex(),
             "created": format_time(self.created)}
        if self.encryption is not None:  # the content key stays secret (§27)
            del d["key"]
        d.update({k: getattr(self, k) for k in self.SETTINGS})
        if self.encryption is not None:
            d["encryption"] = self.encryption
        return seal_envelope(CONFIG_MAGIC, self.version, json.dumps(d, indent=1).encode())

    @classmethod
    def from_bytes(cls, key: str, data: bytes) -> "RepoConfig":
        """Decode the config object.

        Raises:
            UnsupportedFormatError: the repository's format version is newer than this snapstore's.
            IntegrityError: the object is corrupt.
            RepositoryError: the object is not a snapstore config at all (a foreign file).
        """
        if data[:4] != CONFIG_MAGIC:
            raise RepositoryError(f"not a snapstore repository: {key} is a foreign file (no snapstore magic)")
        version, body = open_envelope(key, CONFIG_MAGIC, data)
        try:
            d = loads_exact_fast(body, 4 if b'"encryption"' in body else 1)
            if not isinstance(d, dict):
                raise ValueError("not a JSON object")
            v = max(version, checked_int(d.get("version", version), "version", 256))
        except (ValueError, UnicodeDecodeError) as e:
            raise IntegrityError(key, f"malformed config: {e}") from None
        if d.get("format") != "snapstore":
            raise IntegrityError(key, "not a snapstore config")
        if v > FORMAT_VERSION:
            raise UnsupportedFormatError(
                f"repository format version {v} is newer than this snapstore supports ({FORMAT_VERSION}); upgrade snapstore")
        enc = d.get("encryption")
        if enc is not None:
            from .keyslots import check_section
            check_section(enc)
            if "key" in d:
                raise IntegrityError(key, "an encrypted repository's config holds a content key in the clear")
            d = dict(d, key="00" * 32)  # the real one comes from the data key (§27)
        try:
            k32 = d["key"]
            if not isinstance(k32, str) or len(k32) != 64:
                raise ValueError("key is not 64 hex digits")
            cfg = cls(repo_id=checked_str(d["repo_id"], "repo_id"), key=bytes.fromhex(k32),
                      created=parse_time(checked_str(d["created"], "created")), version=v)
        except (KeyError, ValueError, TypeError) as e:
            raise IntegrityError(key, f"malformed config: {e}") from None
        settings = {k: d[k] for k in cls.SETTINGS if k in d}
        why = check_settings(settings)
        if why is not None:
            raise IntegrityError(key, f"config out of range: {why}")
        for k, x in settings.items():
            setattr(cfg, k, x)
        cfg.encryption = enc
        return cfg
