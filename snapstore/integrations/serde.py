"""An exact, import-free LangGraph serializer: :class:`SafeSerializer`.

Opt in with ``SnapstoreSaver(..., serde=SafeSerializer())`` (or ``serde="safe"``). It implements
LangGraph's ``SerializerProtocol`` (``dumps_typed``/``loads_typed``) and round-trips, with their
exact types, values LangGraph's ``JsonPlusSerializer`` refuses (``Fraction``, ``complex``,
``range``, ``PurePosixPath``/``PureWindowsPath``, pydantic URLs) or changes (tuples come back as
lists there), besides everything it handles (Decimal, datetimes with their tzinfo, UUID, sets,
bytes, enums, dataclasses, pydantic models, namedtuples, LangChain messages, LangGraph's Send,
Interrupt, Command...).

Stored data never holds a module path: a value is msgpack whose extension types are tags of a
fixed registry (docs/langgraph-serde.md lists them). Classes of your own (enums, dataclasses,
pydantic models, namedtuples) are stored under the name you register them with
(``SafeSerializer(types=[Color])`` registers ``Color`` as ``"Color"``; ``types={"color": Color}``
picks the name), and decoding looks that name up in the registry: nothing is imported by a stored
string. A value of any other type raises :class:`~snapstore.errors.UnsupportedValueError` at put
time, naming the type and where it sits (``channel 'v' ['a'][2]``).

Data written by LangGraph's serializer (types ``msgpack``, ``json``, ``bytes``, ``null`` ...)
still decodes, through ``JsonPlusSerializer`` in its strict mode (LangGraph's own safe-type list
plus the registered classes), so turning this on for an existing repository keeps it readable.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import fractions
import ipaddress
import pathlib
import re
import sys
import uuid
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any
from zoneinfo import ZoneInfo

from ..errors import IntegrityError, InvalidInputError, MissingDependencyError, UnregisteredTypeError, \
    UnsupportedValueError

try:
    import ormsgpack
    import pydantic
    from langchain_core.documents import Document
    from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from langgraph.checkpoint.serde.types import _DeltaSnapshot
    from langgraph.types import Command, Interrupt, Overwrite, Send, TimeoutPolicy
except ImportError as e:  # pragma: no cover - exercised without the extra
    raise MissingDependencyError(
        f"snapstore.integrations.serde needs langgraph and langchain-core ({e.name or e} is not installed): "
        "pip install 'snapstore[langgraph]'") from e

__all__ = ["SafeSerializer", "TYPE", "serde_named"]

TYPE = "snapstore-safe/1"
"""The type string :meth:`SafeSerializer.dumps_typed` returns (stored beside the bytes)."""

MAX_DEPTH = 200
"""Containers nested deeper than this are refused (UnsupportedValueError): a cycle, usually."""

# extension type codes (docs/langgraph-serde.md); never renumber, only add
TUPLE, SET, FROZENSET, BYTEARRAY, BIGINT, SURROGATE_STR, PAIRS, ORDERED_DICT, DEQUE = range(1, 10)
FRACTION, COMPLEX, DECIMAL, RANGE = 10, 11, 12, 13
PATH, PURE_POSIX_PATH, PURE_WINDOWS_PATH = 20, 21, 22
UUID, DATETIME, DATE, TIME, TIMEDELTA, TIMEZONE, ZONEINFO = 23, 24, 25, 26, 27, 28, 29
IPADDR, PATTERN = 30, 31
URL, SECRET = 40, 41
LC_MESSAGE, SEND, DELTA_SNAPSHOT = 50, 51, 52
ENUM, DATACLASS, MODEL, NAMEDTUPLE = 60, 61, 62, 63
NDARRAY = 70

_IP = {c.__name__: c for c in (ipaddress.IPv4Address, ipaddress.IPv4Interface, ipaddress.IPv4Network,
                               ipaddress.IPv6Address, ipaddress.IPv6Interface, ipaddress.IPv6Network)}
_URLS = {n: getattr(pydantic, n) for n in (
    "AnyUrl", "AnyHttpUrl", "HttpUrl", "FileUrl", "FtpUrl", "WebsocketUrl", "AnyWebsocketUrl", "AmqpDsn",
    "ClickHouseDsn", "CockroachDsn", "KafkaDsn", "MariaDBDsn", "MongoDsn", "MySQLDsn", "NatsDsn",
    "PostgresDsn", "RedisDsn", "SnowflakeDsn") if isinstance(getattr(pydantic, n, None), type)}
_SECRETS = {"str": pydantic.SecretStr, "bytes": pydantic.SecretBytes}

BUILTIN_CLASSES: dict[str, type] = {
    "lg.Interrupt": Interrupt, "lg.Command": Command, "lg.Overwrite": Overwrite,
    "lg.TimeoutPolicy": TimeoutPolicy, "lc.Document": Document,
}
"""Classes registered in every SafeSerializer, by their stored names (``lg.``/``lc.`` are reserved)."""

_I64_MIN, _U64_MAX = -(1 << 63), (1 << 64) - 1


def _pack(obj: Any) -> bytes:
    return ormsgpack.packb(obj)


def _kind_of(cls: type) -> int:
    if isinstance(cls, type) and issubclass(cls, Enum):
        return ENUM
    if isinstance(cls, type) and issubclass(cls, pydantic.BaseModel):
        return MODEL
    if dataclasses.is_dataclass(cls) and isinstance(cls, type):
        return DATACLASS
    if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields") and hasattr(cls, "_make"):
        return NAMEDTUPLE
    raise InvalidInputError(f"SafeSerializer registers enums, dataclasses, pydantic models and namedtuples; "
                            f"{cls!r} is none of them")


_KIND_WORD = {ENUM: "enum", DATACLASS: "dataclass", MODEL: "pydantic model", NAMEDTUPLE: "namedtuple"}


class SafeSerializer(SerializerProtocol):
    """LangGraph serializer that stores exact values under fixed type tags, never module paths.

    Args:
        types: your own classes to store (enums, dataclasses, pydantic models, namedtuples): an
            iterable of classes (each stored under its ``__qualname__``) or a mapping ``{stored
            name: class}``. Writer and reader must register the same names.
        legacy: serializer for data this one did not write (any type string but
            :data:`TYPE`); default ``JsonPlusSerializer`` restricted to LangGraph's safe types
            plus ``types`` (its strict mode: other classes decode to their raw fields).
    Raises:
        InvalidInputError: a ``types`` entry is none of the four kinds, two names collide, or a
            name starts with a reserved prefix (``lg.``, ``lc.``).

    ``dumps_typed(value)`` returns ``(TYPE, bytes)`` and raises
    :class:`~snapstore.errors.UnsupportedValueError` for a value it has no tag for;
    ``loads_typed((type, bytes))`` returns the value and raises
    :class:`~snapstore.errors.UnregisteredTypeError` for a stored class name not registered here,
    :class:`~snapstore.errors.IntegrityError` for bytes that are not valid data of this format.
    Pydantic models are stored as ``model_dump()`` and rebuilt with ``model_validate`` (private
    attributes are not kept); dataclasses field by field (``init=False`` fields are set after).
    """

    def __init__(self, types: Iterable[type] | Mapping[str, type] = (), *, legacy: SerializerProtocol | None = None):
        named = dict(types) if isinstance(types, Mapping) else {c.__qualname__: c for c in types}
        if not isinstance(types, Mapping) and len(named) != len(list(types)):
            raise InvalidInputError("SafeSerializer: two registered classes share a __qualname__; "
                                    "pass a mapping {name: class} to name them apart")
        self._by_name: dict[str, tuple[type, int]] = {}
        self._by_type: dict[type, tuple[str, int]] = {}
        for name, cls in named.items():
            if not isinstance(name, str) or not name or name.startswith(("lg.", "lc.")):
                raise InvalidInputError(f"SafeSerializer: {name!r} is not a usable name (non-empty str, "
                                        f"not starting with 'lg.' or 'lc.')")
            self._add(name, cls)
        for name, cls in BUILTIN_CLASSES.items():
            self._add(name, cls)
        if legacy is None:
            allow = [(c.__module__, c.__name__) for c in named.values()]
            legacy = JsonPlusSerializer(allowed_msgpack_modules=allow or None)
        self.legacy = legacy

    def _add(self, name: str, cls: type) -> None:
        kind = _kind_of(cls)
        if cls in self._by_type:
            raise InvalidInputError(f"SafeSerializer: {cls!r} registered twice")
        self._by_name[name] = (cls, kind)
        self._by_type[cls] = (name, kind)

    def __repr__(self) -> str:
        own = [n for n in self._by_name if n not in BUILTIN_CLASSES]
        return f"SafeSerializer(types={own!r})"

    # --------------------------------------------------------------------------------------
    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """``(TYPE, msgpack bytes)`` of ``obj`` (UnsupportedValueError: a type without a tag)."""
        return TYPE, _pack(self._enc(obj, 0))

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """The value of ``(type, bytes)`` as :meth:`dumps_typed` (or, for other type strings, the
        legacy serializer) wrote it."""
        type_, raw = data
        if type_ != TYPE:
            return self.legacy.loads_typed((type_, raw))
        errors: list = []  # ormsgpack reports a failing ext hook only as "ext_hook failed"

        def hook(code: int, data: bytes) -> Any:
            try:
                return self._ext(code, data, hook)
            except Exception as e:
                errors.append(e)
                raise

        try:
            return ormsgpack.unpackb(raw, ext_hook=hook)
        except Exception as e:
            first = errors[0] if errors else e
            if isinstance(first, (UnregisteredTypeError, IntegrityError)):
                raise first from None
            raise IntegrityError("serde", f"not valid {TYPE} data: {type(first).__name__}: {first}") from first

    # --------------------------------------------------------------------------------------
    # encoding: a msgpack-native tree whose non-JSON parts are ormsgpack.Ext tags

    def _ext_of(self, code: int, parts: Any, depth: int) -> ormsgpack.Ext:
        return ormsgpack.Ext(code, _pack(self._enc(parts, depth)))

    def _seq(self, items, depth: int) -> list:
        out = []
        for i, x in enumerate(items):
            try:
                out.append(self._enc(x, depth))
            except UnsupportedValueError as e:
                raise _deeper(e, f"[{i}]") from None
        return out

    def _enc(self, v: Any, depth: int) -> Any:
        t = type(v)
        if t is str:
            if v.isascii():
                return v
            try:
                v.encode("utf-8")
                return v
            except UnicodeEncodeError:
                return ormsgpack.Ext(SURROGATE_STR, v.encode("utf-8", "surrogatepass"))
        if v is None or t is bool or t is float or t is bytes:
            return v
        if t is int:
            if _I64_MIN <= v <= _U64_MAX:
                return v
            return ormsgpack.Ext(BIGINT, v.to_bytes((v.bit_length() + 8) // 8, "big", signed=True))
        if depth >= MAX_DEPTH:
            raise UnsupportedValueError(f"{t.__module__}.{t.__qualname__}", "",
                                        f"nested more than {MAX_DEPTH} levels deep (a cycle?)")
        d = depth + 1
        if t is list:
            return self._seq(v, d)
        if t is dict:
            if all(type(k) is str for k in v):
                out = {}
                for k, x in v.items():
                    try:
                        out[k] = self._enc(x, d)
                    except UnsupportedValueError as e:
                        raise _deeper(e, f"[{k!r}]") from None
                if all(k.isascii() or _utf8(k) for k in v):
                    return out
            return ormsgpack.Ext(PAIRS, _pack(self._pairs(v, d)))
        if t is tuple:
            return ormsgpack.Ext(TUPLE, _pack(self._seq(v, d)))
        if t is bytearray:
            return ormsgpack.Ext(BYTEARRAY, bytes(v))
        enc = _ENCODERS.get(t)
        if enc is not None:
            code, parts = enc(v)
            return ormsgpack.Ext(code, _pack(self._seq(parts, d)))
        reg = self._by_type.get(t)
        if reg is not None:
            return self._registered(v, reg[0], reg[1], d)
        if isinstance(v, BaseMessage):
            return self._ext_of(LC_MESSAGE, message_to_dict(v), d)
        if t is Send:
            return ormsgpack.Ext(SEND, _pack(self._seq([v.node, v.arg, v.timeout], d)))
        if t is _DeltaSnapshot:
            return ormsgpack.Ext(DELTA_SNAPSHOT, _pack(self._seq([v.value], d)))
        if isinstance(v, BaseException):
            return repr(v)  # as LangGraph's serializer does (the ERROR write of a failed task)
        np = sys.modules.get("numpy")
        if np is not None and t is np.ndarray and not v.dtype.hasobject:
            return ormsgpack.Ext(NDARRAY, _pack([v.dtype.str, list(v.shape), v.tobytes(order="C")]))
        raise UnsupportedValueError(f"{t.__module__}.{t.__qualname__}", "", _hint(t))

    def _pairs(self, v: dict, d: int) -> list:
        out = []
        for k, x in v.items():
            try:
                out.append([self._enc(k, d), self._enc(x, d)])
            except UnsupportedValueError as e:
                raise _deeper(e, f"[{k!r}]") from None
        return out

    def _registered(self, v: Any, name: str, kind: int, d: int) -> ormsgpack.Ext:
        if kind == ENUM:
            body: Any = v.value
        elif kind == MODEL:
            body = v.model_dump()
        elif kind == NAMEDTUPLE:
            body = list(v)
        else:
            body = {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
        return ormsgpack.Ext(kind, _pack([name, self._enc(body, d)]))

    # --------------------------------------------------------------------------------------
    # decoding

    def _ext(self, code: int, data: bytes, hook) -> Any:
        if code == BIGINT:
            return int.from_bytes(data, "big", signed=True)
        if code == SURROGATE_STR:
            return data.decode("utf-8", "surrogatepass")
        if code == BYTEARRAY:
            return bytearray(data)
        if code == NDARRAY:
            return _ndarray(ormsgpack.unpackb(data))
        p = ormsgpack.unpackb(data, ext_hook=hook)
        if code in (ENUM, DATACLASS, MODEL, NAMEDTUPLE):
            return self._revive(code, p)
        dec = _DECODERS.get(code)
        if dec is None:
            raise IntegrityError("serde", f"unknown {TYPE} type tag {code}")
        try:
            return dec(p)
        except Exception as e:
            raise IntegrityError("serde", f"bad {TYPE} value of tag {code}: {type(e).__name__}: {e}") from e

    def _revive(self, code: int, p: list) -> Any:
        name, body = p
        hit = self._by_name.get(name)
        if hit is None or hit[1] != code:
            raise UnregisteredTypeError(str(name), _KIND_WORD[code])
        cls = hit[0]
        try:
            if code == ENUM:
                return cls(body)
            if code == MODEL:
                return cls.model_validate(body)
            if code == NAMEDTUPLE:
                return cls(*body)
            fields = {f.name: f for f in dataclasses.fields(cls)}
            obj = cls(**{k: x for k, x in body.items() if fields.get(k) is not None and fields[k].init})
            for k, x in body.items():
                if k in fields and not fields[k].init:
                    object.__setattr__(obj, k, x)
            return obj
        except Exception as e:
            raise IntegrityError("serde", f"cannot rebuild {name!r} ({_KIND_WORD[code]}) from stored data: "
                                 f"{type(e).__name__}: {e}") from e


def _utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _deeper(e: UnsupportedValueError, step: str) -> UnsupportedValueError:
    return UnsupportedValueError(e.type_name, step + e.path, e.hint)


def _hint(t: type) -> str:
    if _kind_or_none(t) is not None:
        return f"register it: SafeSerializer(types=[{t.__qualname__}])"
    if issubclass(t, (dict, list, tuple, str, int, float, bytes, set, frozenset)):
        return "subclasses of builtin types are not stored (they would come back as their base type)"
    return "SafeSerializer stores only the types of its fixed registry (docs/langgraph-serde.md)"


def _kind_or_none(t: type) -> int | None:
    try:
        return _kind_of(t)
    except InvalidInputError:
        return None


def _ndarray(p: list) -> Any:
    import numpy as np  # only data written where numpy was installed names this tag

    dtype, shape, buf = p
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise IntegrityError("serde", "an object-dtype array")
    return np.frombuffer(buf, dtype=dt).reshape(shape).copy()


def _datetime_parts(v: _dt.datetime) -> tuple[int, list]:
    return DATETIME, [v.replace(tzinfo=None, fold=0).isoformat(), v.fold, v.tzinfo]


def _time_parts(v: _dt.time) -> tuple[int, list]:
    return TIME, [v.replace(tzinfo=None, fold=0).isoformat(), v.fold, v.tzinfo]


_ENCODERS: dict[type, Any] = {
    set: lambda v: (SET, list(v)),
    frozenset: lambda v: (FROZENSET, list(v)),
    OrderedDict: lambda v: (ORDERED_DICT, [[k, x] for k, x in v.items()]),
    deque: lambda v: (DEQUE, [list(v), v.maxlen]),
    fractions.Fraction: lambda v: (FRACTION, [v.numerator, v.denominator]),
    complex: lambda v: (COMPLEX, [v.real, v.imag]),
    decimal.Decimal: lambda v: (DECIMAL, [str(v)]),
    range: lambda v: (RANGE, [v.start, v.stop, v.step]),
    pathlib.PurePosixPath: lambda v: (PURE_POSIX_PATH, [str(v)]),
    pathlib.PureWindowsPath: lambda v: (PURE_WINDOWS_PATH, [str(v)]),
    type(pathlib.Path()): lambda v: (PATH, [str(v)]),
    uuid.UUID: lambda v: (UUID, [v.bytes]),
    _dt.datetime: _datetime_parts,
    _dt.date: lambda v: (DATE, [v.isoformat()]),
    _dt.time: _time_parts,
    _dt.timedelta: lambda v: (TIMEDELTA, [v.days, v.seconds, v.microseconds]),
    _dt.timezone: lambda v: (TIMEZONE, list(v.__getinitargs__())),
    ZoneInfo: lambda v: (ZONEINFO, [v.key]),
    re.Pattern: lambda v: (PATTERN, [v.pattern, v.flags]),
    **{c: (lambda v: (IPADDR, [type(v).__name__, str(v)])) for c in _IP.values()},
    **{c: (lambda v: (URL, [_URL_NAME[type(v)], str(v)])) for c in _URLS.values()},
    pydantic.SecretStr: lambda v: (SECRET, ["str", v.get_secret_value()]),
    pydantic.SecretBytes: lambda v: (SECRET, ["bytes", v.get_secret_value()]),
}
"""Exact type -> ``(tag, parts)``; the parts are encoded like any value (a list)."""

_URL_NAME = {c: n for n, c in _URLS.items()}


def _pairs_dict(p: list, cls=dict) -> Any:
    return cls((k, x) for k, x in p)


def _datetime(p: list) -> _dt.datetime:
    iso, fold, tz = p
    return _dt.datetime.fromisoformat(iso).replace(fold=fold, tzinfo=tz)


def _time(p: list) -> _dt.time:
    iso, fold, tz = p
    return _dt.time.fromisoformat(iso).replace(fold=fold, tzinfo=tz)


def _lookup(table: dict, name: Any, what: str) -> Any:
    if name not in table:
        raise ValueError(f"unknown {what} {name!r}")
    return table[name]


def _message(d: dict) -> BaseMessage:
    return messages_from_dict([d])[0]


def _send(p: list) -> Send:
    node, arg, timeout = p
    return Send(node, arg, timeout=timeout)


_DECODERS: dict[int, Any] = {
    TUPLE: tuple,
    SET: set,
    FROZENSET: frozenset,
    PAIRS: _pairs_dict,
    ORDERED_DICT: lambda p: _pairs_dict(p, OrderedDict),
    DEQUE: lambda p: deque(p[0], p[1]),
    FRACTION: lambda p: fractions.Fraction(p[0], p[1]),
    COMPLEX: lambda p: complex(p[0], p[1]),
    DECIMAL: lambda p: decimal.Decimal(p[0]),
    RANGE: lambda p: range(p[0], p[1], p[2]),
    PATH: lambda p: pathlib.Path(p[0]),
    PURE_POSIX_PATH: lambda p: pathlib.PurePosixPath(p[0]),
    PURE_WINDOWS_PATH: lambda p: pathlib.PureWindowsPath(p[0]),
    UUID: lambda p: uuid.UUID(bytes=p[0]),
    DATETIME: _datetime,
    DATE: lambda p: _dt.date.fromisoformat(p[0]),
    TIME: _time,
    TIMEDELTA: lambda p: _dt.timedelta(days=p[0], seconds=p[1], microseconds=p[2]),
    TIMEZONE: lambda p: _dt.timezone(*p),
    ZONEINFO: lambda p: ZoneInfo(p[0]),
    PATTERN: lambda p: re.compile(p[0], p[1]),
    IPADDR: lambda p: _lookup(_IP, p[0], "ip address type")(p[1]),
    URL: lambda p: _lookup(_URLS, p[0], "pydantic url type")(p[1]),
    SECRET: lambda p: _lookup(_SECRETS, p[0], "pydantic secret type")(p[1]),
    LC_MESSAGE: _message,
    SEND: _send,
    DELTA_SNAPSHOT: lambda p: _DeltaSnapshot(p[0]),
}
"""Tag -> constructor from the decoded parts. Nothing here imports by a stored name."""


def serde_named(name: str) -> SerializerProtocol:
    """The serializer a string option names: ``"safe"`` -> ``SafeSerializer()``, ``"jsonplus"`` ->
    LangGraph's ``JsonPlusSerializer()`` (the saver's default). InvalidInputError otherwise."""
    if name == "safe":
        return SafeSerializer()
    if name == "jsonplus":
        return JsonPlusSerializer()
    raise InvalidInputError(f"unknown serde {name!r}: 'safe' or 'jsonplus', or a SerializerProtocol object")
