"""Channel and write values as stored items (docs/langgraph-layout.md §2): :class:`ValueCodec`.

A value is stored as a list of *items*, each one chunk of the record's pack: a message as its
``message_to_dict`` JSON when that is exact JSON and comes back equal, anything else as one serde
item ``{"serde": type, "b64": bytes}``; exact JSON values (the checkpoint's versions) as
``{"json": value}``. Kinds: ``m1`` one message, ``m`` a non-empty message list, ``s`` a
DeltaChannel snapshot of one, ``d`` a dict of those two (a graph input ``{"messages": [...]}``:
a header item, then the messages), ``b`` anything else.
"""

from __future__ import annotations

import base64

import orjson

from ...errors import InvalidMessageError, UnsupportedValueError
from ...format.codec import validate
from .deps import BaseMessage, DeltaSnapshot, message_to_dict, messages_from_dict


def is_message_list(v) -> bool:
    """True for a non-empty list of LangChain messages."""
    return isinstance(v, list) and len(v) > 0 and all(isinstance(m, BaseMessage) for m in v)


def is_message_dict(v) -> bool:
    """True for a non-empty plain ``dict`` (not a subclass) with string keys whose every value is a
    LangChain message or a non-empty plain list of them: what a graph input such as
    ``{"messages": [HumanMessage(...)]}`` is, stored as kind ``d`` (layout §2)."""
    return (type(v) is dict and len(v) > 0 and all(type(k) is str for k in v)
            and all(isinstance(x, BaseMessage) or (type(x) is list and is_message_list(x)) for x in v.values()))


def json_copy(v):
    """A copy of the JSON value ``v`` (dicts and lists copied all the way down; str, numbers,
    bools and None shared, being immutable)."""
    if isinstance(v, dict):
        return {k: json_copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [json_copy(x) for x in v]
    return v


class ValueCodec:
    """Encodes values to items and back through a LangGraph serializer, remembering messages.

    Args:
        serde: the LangGraph ``SerializerProtocol`` for what is not a message.
        decoded_cache: stored message items kept decoded at most (see ``SnapstoreSaver.DECODED_CACHE``).

    The codec remembers, by identity, each message it decoded and the item it came from, so a
    ``put`` of messages a ``get_tuple`` handed out reuses their items instead of encoding again.
    Encoding caches (``cache``/``old`` arguments) map ``id(message)`` to ``(message, item, message
    id)``; an entry counts only while the message is the same object with the same id.
    """

    def __init__(self, serde, decoded_cache: int):
        self.serde = serde
        self.decoded_cache = decoded_cache
        self._dec: dict = {}  # id(stored item) -> (item, message, its id)
        self._rev: dict = {}  # id(message) -> (message, stored item, its id)

    def blob(self, value, where: str = "") -> dict:
        """One serde item of ``value``. Raises UnsupportedValueError (its path prefixed by
        ``where``) when the serializer refuses it."""
        try:
            t, b = self.serde.dumps_typed(value)
        except UnsupportedValueError as e:  # SafeSerializer: name the channel too
            raise (e.within(where) if where else e) from None
        return {"serde": t, "b64": base64.b64encode(b).decode("ascii")}

    def unblob(self, item: dict):
        """The value of a serde item."""
        return self.serde.loads_typed((item["serde"], base64.b64decode(item["b64"])))

    def enc_msg(self, m, cache: dict, where: str = "") -> dict:
        """The item of message ``m`` (its dict, or a serde item when that is not exact); noted
        in ``cache``."""
        hit = cache.get(id(m)) or self._rev.get(id(m))
        if hit is not None and hit[0] is m and hit[2] == m.id:
            return hit[1]
        item = None
        try:
            d = message_to_dict(m)
            validate(d, "message")
            back = messages_from_dict([d])[0]
            if type(back) is type(m) and back == m:
                item = d
        except (InvalidMessageError, Exception):  # not exact JSON, or does not round-trip: serde
            item = None
        if item is None:
            item = self.blob(m, where)
        # the id is kept beside: add_messages gives a message written without one an id in place
        cache[id(m)] = (m, item, m.id)
        return item

    def dec_item(self, item):
        """The message (or serde value) of one stored item, the same object for the same item."""
        if isinstance(item, dict) and "serde" in item and "b64" in item:
            return self.unblob(item)
        hit = self._dec.get(id(item))
        if hit is not None and hit[0] is item and hit[1].id == hit[2]:
            return hit[1]
        m = messages_from_dict([item])[0]
        if len(self._dec) >= self.decoded_cache:
            self._dec.clear()
            self._rev.clear()
        self._dec[id(item)] = (item, m, m.id)
        self._rev[id(m)] = (m, item, m.id)
        return m

    def enc_value(self, v, cache: dict, old: dict | None = None, where: str = "") -> tuple[str, list]:
        """``(kind, items)`` of a channel or write value: ``m1`` one message, ``m`` a non-empty
        message list, ``s`` a DeltaChannel snapshot of one, ``d`` a dict of those two
        (:func:`is_message_dict`: a header item ``{"lgd": [[key, "m1" or "m", n], ...]}`` in the
        dict's key order, then each key's ``n`` items), ``b`` anything else (one serde item).
        ``old``: the run's previous encoding cache. ``where`` (e.g. ``"channel 'v'"``) prefixes
        the path of an UnsupportedValueError."""
        if isinstance(v, BaseMessage):
            return "m1", [self.enc_msg(v, cache, where)]
        if is_message_dict(v):
            head, items = [], []
            for k, x in v.items():
                sub = f"{where} [{k!r}]" if where else ""
                kind, its = self.enc_value(x, cache, old, sub)
                head.append([k, kind, len(its)])
                items.extend(its)
            return "d", [{"lgd": head}] + items
        if is_message_list(v):
            kind, msgs = "m", v
        elif isinstance(v, DeltaSnapshot) and is_message_list(v.value):
            kind, msgs = "s", v.value
        else:
            return "b", [self.blob(v, where)]
        items = []
        for i, m in enumerate(msgs):
            hit = cache.get(id(m)) or (old.get(id(m)) if old else None) or self._rev.get(id(m))
            if hit is not None and hit[0] is m and hit[2] == m.id:
                cache[id(m)] = hit
                items.append(hit[1])
            else:
                items.append(self.enc_msg(m, cache, f"{where} [{i}]" if where else ""))
        return kind, items

    def dec_value(self, kind: str, items: list):
        """The value of ``items`` stored as ``kind``. Raises ValueError on a wrong item count (or
        a ``d`` header that does not describe its items)."""
        if kind == "b":
            if len(items) != 1:
                raise ValueError(f"a serde value takes 1 item, found {len(items)}")
            return self.unblob(items[0])
        if kind == "d":
            return self._dec_dict(items)
        msgs = [self.dec_item(i) for i in items]
        if kind == "m1":
            if len(msgs) != 1:
                raise ValueError(f"a message takes 1 item, found {len(msgs)}")
            return msgs[0]
        if not msgs:
            raise ValueError("an empty message list")
        return DeltaSnapshot(msgs) if kind == "s" else msgs

    def _dec_dict(self, items: list) -> dict:
        """The dict of a ``d`` value's items (header first). Raises ValueError when malformed."""
        head = items[0].get("lgd") if items and isinstance(items[0], dict) else None
        if not isinstance(head, list) or not head:
            raise ValueError("a message dict needs its header item first")
        out: dict = {}
        pos = 1
        for row in head:
            if not (isinstance(row, list) and len(row) == 3 and type(row[0]) is str and row[1] in ("m1", "m")
                    and type(row[2]) is int and row[2] >= 1) or row[0] in out:
                raise ValueError(f"a message dict header row {row!r} is malformed")
            k, kind, n = row
            if pos + n > len(items):
                raise ValueError(f"a message dict of {len(items)} items is shorter than its header says")
            out[k] = self.dec_value(kind, items[pos:pos + n])
            pos += n
        if pos != len(items):
            raise ValueError(f"a message dict of {len(items)} items is longer than its header says ({pos})")
        return out

    def json_or_blob(self, value, where: str = "") -> dict:
        """``{"json": value}`` when ``value`` is exact JSON that comes back equal (compresses far
        better than serde bytes in base64), else a serde blob."""
        try:
            validate(value, "value")
            if orjson.loads(orjson.dumps(value)) == value:
                return {"json": value}
        except (InvalidMessageError, TypeError, ValueError):
            pass
        return self.blob(value, where)

    def unjson(self, item: dict):
        """Inverse of :meth:`json_or_blob`: a new value each call (JSON copied, not shared with the
        cached record it came from: LangGraph changes a checkpoint's ``versions_seen`` in place)."""
        return json_copy(item["json"]) if "json" in item else self.unblob(item)

    def md_field(self, md: dict) -> dict:
        """LangGraph metadata as a record field: ``{"md": md}`` if valid snapstore metadata,
        else ``{"mdb": serde item}``."""
        try:
            validate(md, "metadata")
            return {"md": md}
        except InvalidMessageError:
            return {"mdb": self.blob(md, "checkpoint metadata")}

    def md_from(self, d: dict) -> dict:
        """Inverse of :meth:`md_field` (``{}`` when ``d`` holds neither): a new dict each call, so
        a caller that changes it in place (LangGraph does) never changes a cached record."""
        if "md" in d:
            return json_copy(d["md"])
        if "mdb" in d:
            return self.unblob(d["mdb"])
        return {}
