"""The snapstore error hierarchy.

Every error snapstore raises on purpose derives from :class:`SnapstoreError`, so callers can catch
one class. Errors about bad input also derive from :class:`ValueError`; "not found" errors also derive
from :class:`LookupError`. Each error's message names what was wrong (the run, checkpoint, object key
or value) in one line.

Hierarchy::

    SnapstoreError
    ├── InvalidInputError (ValueError)        bad argument; nothing was stored
    │   ├── InvalidMessageError                a value that is not exact JSON (NaN, set, bytes, ...)
    │   ├── InvalidRunIdError                  run id not a non-empty str
    │   ├── UnsupportedValueError              a LangGraph value SafeSerializer has no type tag for
    │   ├── UnregisteredTypeError              stored data names a type tag the reader did not register
    │   └── InvalidCheckpointIdError           checkpoint id not a non-empty str
    ├── NotFoundError (LookupError)
    │   ├── RunNotFound
    │   ├── CheckpointNotFound
    │   └── ObjectNotFound                     a store key that does not exist
    ├── ConflictError                          another writer got there first; nothing overwritten
    │   └── PreconditionFailed                 store-level: create-only / compare-and-swap refused
    ├── IntegrityError                         an object's bytes do not match its digest or format
    │   └── ObjectTooLarge                      larger than a whole read of its kind may be
    ├── UnsupportedFormatError                 repository written by a newer snapstore
    ├── RepositoryError                        not a snapstore repository (e.g. a foreign ``config``)
    │   └── RepositoryNotFound                 nothing at the location yet
    ├── StoreError                             the backend failed (I/O, network, permissions)
    │   ├── AccessDenied
    │   ├── BucketNotFound
    │   └── CredentialsError
    └── EncryptionError                        encryption cannot be used as asked (docs/format.md §27)
        ├── WrongPassphrase                    no key slot opens with the passphrase given
        └── KeyRequired                        encrypted, and no passphrase or KMS key was given
"""

from __future__ import annotations


class SnapstoreError(Exception):
    """Base class of every error snapstore raises on purpose."""


class InvalidInputError(SnapstoreError, ValueError):
    """An argument was rejected before anything was written."""


class InvalidMessageError(InvalidInputError):
    """A message, state or metadata value is not an exact JSON value.

    Raised for NaN/Infinity, dict keys that are not strings, and objects JSON cannot represent
    (sets, bytes, datetimes, custom classes). The message names the path to the bad value,
    e.g. ``messages[3]['content'][0]``.
    """


class InvalidRunIdError(InvalidInputError):
    """A run id was not a non-empty ``str``."""


class UnsupportedValueError(InvalidInputError):
    """A value has a type :class:`snapstore.integrations.serde.SafeSerializer` has no tag for
    (an unregistered class, a subclass of a builtin, a cycle). Raised at put time; nothing stored.

    Attributes:
        type_name: ``module.qualname`` of the refused value's type (in the message only; it is
            never stored).
        path: where the value sits: a LangGraph location (``channel 'v'``) when the saver knows
            it, then the key path inside the value, e.g. ``channel 'v' ['a'][2]``.
    """

    def __init__(self, type_name: str, path: str = "", hint: str = ""):
        self.type_name = type_name
        self.path = path
        self.hint = hint
        where = f" at {path}" if path else ""
        super().__init__(f"cannot serialize a value of type {type_name}{where}" + (f": {hint}" if hint else ""))

    def within(self, outer: str) -> "UnsupportedValueError":
        """A copy whose path starts with ``outer`` (e.g. ``"channel 'v'"``)."""
        path = f"{outer} {self.path}" if self.path else outer
        return UnsupportedValueError(self.type_name, path, self.hint)


class UnregisteredTypeError(InvalidInputError):
    """Stored data names a type tag (``name``) that the reading serializer's registry lacks: the
    writer registered a class (``SafeSerializer(types=[...])``) the reader did not."""

    def __init__(self, name: str, kind: str):
        self.name = name
        self.kind = kind
        super().__init__(f"stored data holds {'an' if kind[0] in 'aeiou' else 'a'} {kind} registered as {name!r}, which this SafeSerializer does not "
                         f"know: register the same class, SafeSerializer(types=[...])")


class InvalidCheckpointIdError(InvalidInputError):
    """A checkpoint id was not a non-empty ``str``."""


class NotFoundError(SnapstoreError, LookupError):
    """Something that was asked for does not exist."""


class RunNotFound(NotFoundError):
    """The run has no live checkpoint."""


class CheckpointNotFound(NotFoundError):
    """The run has no live checkpoint with that id."""


class ObjectNotFound(NotFoundError):
    """A key is missing from the object store. ``key`` names it."""

    def __init__(self, key: str, message: str | None = None):
        super().__init__(message or f"object not found: {key}")
        self.key = key


class ColdObjectError(SnapstoreError):
    """An archived bundle is in a storage class that must be restored before it can be read
    (``GLACIER``, ``DEEP_ARCHIVE``). ``key`` names it; the message names the ``snapstore restore``
    command to run (docs/format.md §28)."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


class ConflictError(SnapstoreError):
    """Another writer changed the run first; this write was refused and nothing was overwritten.

    Reload the run (``latest``) and retry, or ``fork`` it under a new run id.
    """


class PreconditionFailed(ConflictError):
    """A create-only or compare-and-swap write was refused by the store. ``key`` names the object."""

    def __init__(self, key: str, message: str | None = None):
        super().__init__(message or f"precondition failed (object exists or changed): {key}")
        self.key = key


class IntegrityError(SnapstoreError):
    """A stored object is corrupt: its digest or structure does not match. ``key`` names it."""

    def __init__(self, key: str, message: str):
        super().__init__(f"corrupt object {key}: {message}")
        self.key = key


class ObjectTooLarge(IntegrityError):
    """A whole read of an object was refused before any of its bytes were read: it is larger than
    objects of its kind may be (docs/format.md §3 "Limits"; for packs, larger than a reader takes
    in one read: the read path then reads it in byte ranges).

    Attributes:
        key: the object key.
        size: the object's length in bytes (as the store reported it).
        limit: the most bytes a whole read of that kind of object takes.
    """

    def __init__(self, key: str, size: int, limit: int, what: str = "an object of its kind"):
        super().__init__(key, f"{size} bytes, more than {what} may have ({limit} bytes, docs/format.md §3)")
        self.size = size
        self.limit = limit


class HeadReplayed(IntegrityError):
    """An encrypted repository's run went back below what this caller saw (docs/format.md §27
    "Replays"): its newest log record is older than the one the caller last saw (deleted newest
    records, or an older sealed record put back under the same key). ``key`` names the newest
    record's manifest key.

    Attributes:
        run_id: the run. seen_seq: the newest log position the caller saw. found_seq: the one
            found now (an int).
    """

    def __init__(self, key: str, run_id: str, seen_seq: int, found_seq: int, message: str):
        super().__init__(key, message)
        self.run_id, self.seen_seq, self.found_seq = run_id, seen_seq, found_seq


class UnsupportedFormatError(SnapstoreError):
    """The repository uses a format version this snapstore cannot read or write."""


class RepositoryError(SnapstoreError):
    """The location is not a usable snapstore repository (e.g. a foreign object at ``config``)."""


class RepositoryNotFound(RepositoryError):
    """The location holds no repository (no ``config`` object)."""


class StoreError(SnapstoreError):
    """The storage backend failed (disk I/O error, network failure, server error)."""


class AccessDenied(StoreError):
    """The backend refused the request for lack of permission."""


class BucketNotFound(StoreError):
    """The S3 bucket does not exist."""


class CredentialsError(StoreError):
    """Credentials are missing or invalid."""


class MissingDependencyError(SnapstoreError, ImportError):
    """An optional integration was used without its extra installed.

    The message names the missing package and the extra to install, e.g.
    ``pip install 'snapstore[langgraph]'``.
    """


class CompactedRecordError(IntegrityError):
    """A compacted record (a manifest object of 0 bytes, docs/format.md §14) has no valid copy in
    any log segment covering its position. ``key`` names the manifest; ``segment`` is ``(key,
    message)`` of the unreadable log segment that was the last to cover it, or None."""

    segment: tuple | None = None


class EncryptionError(SnapstoreError):
    """Client-side encryption cannot be used as asked (docs/format.md §27): the repository is
    encrypted and no passphrase was given, a passphrase was given for a repository that is not
    encrypted, or a key slot cannot be added or removed."""


class WrongPassphrase(EncryptionError):
    """No key slot of the encrypted repository opens with the passphrase given."""


class KeyRequired(EncryptionError):
    """The repository is encrypted and was opened with no passphrase and no KMS key (the CLI asks
    for a passphrase on a terminal when it gets this)."""
