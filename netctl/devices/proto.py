"""Protobuf's wire format, the little the kubelet's gRPC APIs need: no generated code.

The kubelet's PodResources answer (and, in the kit, the device-plugin API and the CRI
calls the tests make) are a handful of messages; they are encoded and decoded here by
field number (:func:`encode`, :func:`decode`), nested messages decoded on demand
(:func:`messages`), and sent through grpcio with identity serializers. Unknown fields
are kept by number and never fail a decode: a newer kubelet's answer still reads.
"""

from __future__ import annotations

Fields = list[tuple[int, "int | bool | str | bytes | Fields"]]
Message = dict[int, list[int | bytes]]


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 as protobuf encodes it: two's complement, ten bytes
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode(fields: Fields) -> bytes:
    """Fields in order: ints and bools as varints, str/bytes/nested lists
    length-delimited."""
    out = bytearray()
    for num, value in fields:
        if isinstance(value, bool | int):
            out += _varint(num << 3) + _varint(int(value))
        else:
            raw = value.encode() if isinstance(value, str) else \
                value if isinstance(value, bytes) else encode(value)
            out += _varint(num << 3 | 2) + _varint(len(raw)) + raw
    return bytes(out)


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


def integer(msg: Message, num: int) -> int:
    """Field ``num`` as an integer (0 when absent)."""
    value = msg.get(num, [0])[0]
    return value if isinstance(value, int) else 0


def messages(msg: Message, num: int) -> list[Message]:
    """The nested messages of field ``num``, decoded."""
    return [decode(raw) for raw in msg.get(num, []) if isinstance(raw, bytes)]


