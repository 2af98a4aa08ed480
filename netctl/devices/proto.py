"""Protobuf's wire format, the little the kubelet's gRPC APIs need: no generated code.

The kubelet's PodResources answer is a handful of messages, decoded here by field number
(:func:`decode`, nested messages on demand: :func:`messages`) and received through grpcio
with identity serializers; the kit encodes its fakes' (``netctl_kit.protoencode``). Unknown
fields are kept by number and never fail a decode: a newer kubelet's answer still reads.
"""

from __future__ import annotations

Message = dict[int, list[int | bytes]]


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if i >= len(buf):
            raise ValueError("protobuf: a varint runs past the end of the message")
        byte = buf[i]
        i += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, i


def decode(buf: bytes) -> Message:
    """field number → its values (varints as int, length-delimited as bytes);
    ``ValueError`` for a message that is not protobuf."""
    out: Message = {}
    i = 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        num, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = _read_varint(buf, i)
        elif wire == 2:
            size, i = _read_varint(buf, i)
            if i + size > len(buf):
                raise ValueError("protobuf: a field runs past the end of the message")
            value, i = buf[i:i + size], i + size
        elif wire == 1:
            value, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wire == 5:
            value, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise ValueError(f"protobuf: wire type {wire} not handled")
        out.setdefault(num, []).append(value)
    return out


def _text(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def text(msg: Message, num: int) -> str:
    """Field ``num`` as a string ("" when absent)."""
    return _text(msg.get(num, [b""])[0])


def texts(msg: Message, num: int) -> list[str]:
    """A ``repeated string`` field."""
    return [_text(v) for v in msg.get(num, [])]


def messages(msg: Message, num: int) -> list[Message]:
    """The nested messages of field ``num``, decoded."""
    return [decode(raw) for raw in msg.get(num, []) if isinstance(raw, bytes)]


