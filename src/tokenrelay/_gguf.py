"""Read the metadata (key/value) section of a GGUF file from a byte buffer.

Why not the ``gguf`` package's ``GGUFReader``: it builds a numpy view per element and takes ~5 s to read
SmolLM2's 49k-token vocabulary on this machine; this reader stops after the metadata and takes ~0.1 s
(measured in ``tests/test_gguf.py``'s comparison with ``GGUFReader``, which also checks that both agree).

Layout (GGUF v2/v3, little-endian): ``b"GGUF"``, ``u32 version``, ``u64 tensor_count``, ``u64 kv_count``, then
``kv_count`` entries of ``string key, u32 value_type, value``. A string is ``u64 length`` + UTF-8 bytes; an
array is ``u32 element_type, u64 count`` + elements. Sans-I/O: it parses a buffer the caller has read.
"""

from __future__ import annotations

import struct
from typing import Union

__all__ = ["GGUFFormatError", "GGUFValue", "read_gguf_metadata"]

GGUFValue = Union[int, float, bool, str, list["GGUFValue"]]  # noqa: UP007 (a runtime alias on 3.10)

_SCALARS: dict[int, struct.Struct] = {
    0: struct.Struct("<B"),
    1: struct.Struct("<b"),
    2: struct.Struct("<H"),
    3: struct.Struct("<h"),
    4: struct.Struct("<I"),
    5: struct.Struct("<i"),
    6: struct.Struct("<f"),
    7: struct.Struct("<?"),
    10: struct.Struct("<Q"),
    11: struct.Struct("<q"),
    12: struct.Struct("<d"),
}
_STRING, _ARRAY = 8, 9
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class GGUFFormatError(ValueError):
    """The buffer is not a GGUF file, or it ends before its metadata does."""


class _Cursor:
    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def unpack(self, st: struct.Struct) -> tuple[object, ...]:
        end = self.pos + st.size
        if end > len(self.buf):
            raise GGUFFormatError(f"truncated at byte {self.pos} (file is {len(self.buf)} bytes)")
        value = st.unpack_from(self.buf, self.pos)
        self.pos = end
        return value

    def u32(self) -> int:
        value = self.unpack(_U32)[0]
        assert isinstance(value, int)
        return value

    def u64(self) -> int:
        value = self.unpack(_U64)[0]
        assert isinstance(value, int)
        return value

    def string(self) -> str:
        n = self.u64()
        end = self.pos + n
        if end > len(self.buf):
            raise GGUFFormatError(f"truncated string at byte {self.pos} (file is {len(self.buf)} bytes)")
        raw = bytes(self.buf[self.pos : end])
        self.pos = end
        return raw.decode("utf-8", "replace")

    def value(self, vtype: int) -> GGUFValue:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype = self.u32()
            count = self.u64()
            if etype == _STRING:
                return [self.string() for _ in range(count)]
            st = _SCALARS.get(etype)
            if st is None:
                if etype == _ARRAY:
                    return [self.value(_ARRAY) for _ in range(count)]
                raise GGUFFormatError(f"unknown array element type {etype} at byte {self.pos}")
            size = st.size * count
            if self.pos + size > len(self.buf):
                raise GGUFFormatError(f"truncated array at byte {self.pos} (file is {len(self.buf)} bytes)")
            items = [v[0] for v in st.iter_unpack(self.buf[self.pos : self.pos + size])]
            self.pos += size
            return items
        st = _SCALARS.get(vtype)
        if st is None:
            raise GGUFFormatError(f"unknown value type {vtype} at byte {self.pos}")
        return self.unpack(st)[0]  # type: ignore[return-value]


def read_gguf_metadata(buf: bytes | memoryview) -> dict[str, GGUFValue]:
    """All metadata key/value pairs of a GGUF file, given (at least) the bytes up to the end of its metadata."""
    cur = _Cursor(buf)
    if bytes(cur.buf[:4]) != b"GGUF":
        raise GGUFFormatError("not a GGUF file (the first 4 bytes are not b'GGUF')")
    cur.pos = 4
    version = cur.u32()
    if version not in (2, 3):
        raise GGUFFormatError(f"unsupported GGUF version {version} (expected 2 or 3, little-endian)")
    cur.u64()  # tensor count: tensors are not read
    kv_count = cur.u64()
    meta: dict[str, GGUFValue] = {}
    for _ in range(kv_count):
        key = cur.string()
        meta[key] = cur.value(cur.u32())
    return meta
