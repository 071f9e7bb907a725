"""Verify of an encrypted repository without its key: its structure (docs/format.md §27 "Verify
without the key").

Layer 3. Whoever holds no passphrase (an operator, a backup job) can still check what the stored
bytes say without decrypting: the config and its key slots parse; every object's key has a shape
of the layout (§4); every object's stored size is one a sealed object has; every object's trailer
(its last 33 bytes: one ranged GET each) is a sealed trailer of the repository's key id whose
plaintext length fits that size (form 2: ends in the key id; a large object's length fits); and every run's log positions from 0 to its newest are present
or lie at or below the highest position a removal record's name covers (removal records are sealed:
their ranges are not readable without the key, only their highest position, which their key
names). What needs the key (content, checksums, references between objects, the MAC of the
settings, ciphertext authenticity) is not checked: the report says so in a ``not-decrypted``
warning. Verify with the passphrase checks everything (:mod:`snapstore.maintenance.verify`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ..errors import IntegrityError, ObjectNotFound
from ..format import keys, keyslots, sealed, sealed2, sealed3
from ..format.config import RepoConfig
from .verify import Problem, VerifyReport

TRAILER_READS = 16
"""Trailer reads (33-byte ranged GETs) in flight at once."""

KNOWN_OTHER = ("archive/data/", "archive/index/", "archive/log/")
"""Prefixes of keys :func:`~snapstore.format.keys.parse_key` calls ``other`` that are part of the
layout (archive bundles, their index records and the thin bundle logs, §28)."""


def encrypted_config(store) -> RepoConfig | None:
    """The config at ``store`` if it is an encrypted repository's (read as stored), else None
    (a plain repository, or no repository).

    Raises:
        IntegrityError / UnsupportedFormatError: the config does not parse.
    """
    try:
        data = store.get(keys.CONFIG)
    except ObjectNotFound:
        return None
    cfg = RepoConfig.from_bytes(keys.CONFIG, data)
    return cfg if cfg.encryption is not None else None


def _known_key(key: str) -> bool:
    kind = keys.parse_key(key).kind
    if kind == "other":
        parts = key.split("/")
        return key.startswith(KNOWN_OTHER) or (parts[0] == "runs" and len(parts) == 5 and parts[2] == "w")
    return kind != "run"


def _check_form2(rep: VerifyReport, info, tail: bytes, key_id: bytes, layouts=sealed2) -> None:
    """Add a ``corrupt-sealed`` error to ``rep`` unless the object ``info`` of a form-2 (or, with
    ``layouts`` :mod:`sealed3`, form-3) repository, whose last bytes are ``tail``, ends in the key
    id ``key_id`` (4 bytes) and, when large, in the plaintext length its size says (§27 "Sealed
    objects, form 2", "form 3")."""
    layout, plain_len = layouts.layout_of(info.key, info.size)
    if tail[-sealed2.KEY_ID:] != key_id:
        rep.errors.append(Problem("corrupt-sealed", info.key, f"its last bytes name key id {tail[-4:].hex()}, not the "
                                  f"repository's {key_id.hex()} (a plaintext object, or another key)"))
    elif layout == sealed2.LARGE and int.from_bytes(tail[-sealed2.LARGE_TRAILER:-sealed2.KEY_ID], "big") != plain_len:
        rep.errors.append(Problem("corrupt-sealed", info.key, f"{info.size} stored bytes, the trailer says "
                                  f"{int.from_bytes(tail[-12:-4], 'big')} plaintext bytes"))


def verify_structure(store, cfg: RepoConfig, progress: Callable[[str, int, int], None] | None = None) -> VerifyReport:
    """Check an encrypted repository's structure without its key (module docstring).

    Args:
        store: the store holding the sealed objects (not a SealedStore: the bytes as stored).
        cfg: its config (:func:`encrypted_config`).
        progress: optional ``progress(phase: str, done: int, total: int)``.
    Returns:
        A :class:`~snapstore.maintenance.verify.VerifyReport`: errors ``corrupt-sealed`` (an object
        whose size or trailer no sealed object of this repository has: plaintext dropped in,
        truncated, extended, another key id), ``missing-manifest`` (a log position no object
        and no removal record's name accounts for); warnings ``unknown-key`` and
        ``not-decrypted`` (always: what was not checked). ``checked`` counts objects, trailers,
        runs and log positions.
    Raises:
        StoreError: the store cannot be listed or read.
    """
    rep = VerifyReport()
    key_id = bytes.fromhex(cfg.encryption["key_id"])
    cipher = cfg.encryption.get("cipher")
    form2 = cipher in (sealed2.CIPHER, keyslots.CIPHER_3)
    layouts = sealed3 if cipher == keyslots.CIPHER_3 else sealed2

    def sized_ok(info) -> bool:
        return (layouts.layout_of(info.key, info.size) if form2 else sealed.plain_size(info.size)) is not None
    objects = [i for i in store.list("") if i.key != keys.CONFIG]
    runs: dict[str, dict] = {}  # run key -> {"seqs": set, "removed_hi": int}
    for info in objects:
        if not _known_key(info.key):
            rep.warnings.append(Problem("unknown-key", info.key, "not a key of the repository layout (§4)"))
        if not sized_ok(info):
            rep.errors.append(Problem("corrupt-sealed", info.key, f"{info.size} stored bytes: no sealed object has "
                                      "this size (a plaintext object, or truncated)"))
        parts = keys.parse_key(info.key)
        if parts.kind == "manifest":
            try:
                seq = keys.seq_from_manifest_key(info.key)
            except IntegrityError as e:
                rep.errors.append(Problem("corrupt-manifest", info.key, str(e)))
                continue
            runs.setdefault(parts.run_key, {"seqs": set(), "removed_hi": -1})["seqs"].add(seq)
        elif parts.kind == "removals":
            name = parts.rest.split(".", 1)[0]
            if len(name) == 16 and not name.strip("0123456789abcdef"):
                r = runs.setdefault(parts.run_key, {"seqs": set(), "removed_hi": -1})
                r["removed_hi"] = max(r["removed_hi"], keys.SEQ_MAX - int(name, 16))
    sized = [i for i in objects if sized_ok(i)]

    def trailer(info):
        return info, store.get(info.key, (-sealed.TRAILER, None))

    done = 0
    with ThreadPoolExecutor(TRAILER_READS) as pool:
        for info, tail in pool.map(trailer, sized):
            done += 1
            if progress is not None and (done % 256 == 0 or done == len(sized)):
                progress("trailers", done, len(sized))
            if form2:
                _check_form2(rep, info, tail, key_id, layouts)
                continue
            parsed = sealed.parse_trailer(tail)
            if parsed is None:
                rep.errors.append(Problem("corrupt-sealed", info.key, "no sealed trailer (a plaintext object, or damaged)"))
            elif parsed[0] != key_id:
                rep.errors.append(Problem("corrupt-sealed", info.key, f"sealed under key id {parsed[0].hex()}, not "
                                          f"the repository's {key_id.hex()}"))
            elif sealed.sealed_size(parsed[2]) != info.size:
                rep.errors.append(Problem("corrupt-sealed", info.key, f"{info.size} stored bytes, the trailer says "
                                          f"{sealed.sealed_size(parsed[2])}"))
    positions = 0
    for rk, r in sorted(runs.items()):
        seqs = r["seqs"]
        top = max(seqs)
        positions += top + 1
        if not cfg.removals:
            continue  # written before removal records (§16): gaps are not judged
        missing = [s for s in range(r["removed_hi"] + 1, top) if s not in seqs]
        if missing:
            rep.errors.append(Problem("missing-manifest", keys.manifest_key(rk, missing[-1]),
                                      f"{len(missing)} log position(s) from {missing[0]} to {missing[-1]} hold no "
                                      "object and lie above every removal record (deleted outside snapstore)"))
    rep.warnings.append(Problem("not-decrypted", keys.CONFIG, f"encrypted repository (key {key_id.hex()}) checked "
                                "without its key: sizes, trailers, key names and log positions only; give the "
                                "passphrase to check contents, checksums and references"))
    rep.checked = {"objects": len(objects), "trailers": len(sized), "runs": len(runs), "log positions": positions}
    return rep


__all__ = ["encrypted_config", "verify_structure"]
