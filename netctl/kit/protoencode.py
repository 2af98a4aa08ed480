"""Protobuf's wire format encoded, for the kit's fakes and the tests (the kubelet's
device-plugin and DRA APIs, CRI): the other half of :mod:`netctl.devices.proto`, which the
daemon only decodes."""

from __future__ import annotations

from netctl.devices.proto import Message

Fields = list[tuple[int, "int | bool | str | bytes | Fields"]]


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


def integer(msg: Message, num: int) -> int:
    """Field ``num`` as an integer (0 when absent)."""
    value = msg.get(num, [0])[0]
    return value if isinstance(value, int) else 0
