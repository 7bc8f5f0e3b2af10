"""Read the metadata (key/value) section of a GGUF file from a byte buffer.

Why not the ``gguf`` package's ``GGUFReader``: it builds a numpy view per element and takes ~5 s to read
SmolLM2's 49k-token vocabulary on this machine; this reader stops after the metadata and takes ~0.1 s
(measured in ``tests/test_gguf.py``'s comparison with ``GGUFReader``, which also checks that both agree).

Layout (GGUF v2/v3, little-endian): ``b"GGUF"``, ``u32 version``, ``u64 tensor_count``, ``u64 kv_count``, then
``kv_count`` entries of ``string key, u32 value_type, value``. A string is ``u64 length`` + UTF-8 bytes; an
array is ``u32 element_type, u64 count`` + elements. Sans-I/O: it parses a buffer the caller has read.

A caller reading a large file in growing chunks needs to tell "not a GGUF file" (give up now) from "the buffer
ends too soon" (read more): :func:`check_gguf_header` checks the fixed 24-byte header on its own, and only
:class:`GGUFTruncatedError` means more bytes could help. Given ``file_size``, a length that points past the end
of the file is a plain format error, so a corrupt length never makes the caller read the whole file.
"""

from __future__ import annotations

import struct
from typing import Union

__all__ = [
    "GGUF_HEADER_SIZE",
    "GGUFFormatError",
    "GGUFTruncatedError",
    "GGUFValue",
    "check_gguf_header",
    "read_gguf_metadata",
]

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
_HEADER = struct.Struct("<4sIQQ")  # magic, version, tensor count, metadata key/value count
#: Bytes of the fixed header that :func:`check_gguf_header` needs.
GGUF_HEADER_SIZE = _HEADER.size


class GGUFFormatError(ValueError):
    """The buffer is not a GGUF file, or it ends before its metadata does."""


class GGUFTruncatedError(GGUFFormatError):
    """The buffer ends before the metadata does, and the file may hold the rest: read more and try again."""


class _Cursor:
    def __init__(self, buf: bytes | memoryview, file_size: int | None) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.file_size = file_size

    def need(self, end: int, what: str) -> None:
        """Raise unless ``buf[pos:end]`` exists: truncated if the file may hold it, malformed if it cannot."""
        if end <= len(self.buf):
            return
        if self.file_size is not None and end > self.file_size:
            raise GGUFFormatError(
                f"{what} at byte {self.pos} runs past the end of the file ({self.file_size} bytes)"
            )
        raise GGUFTruncatedError(f"truncated {what} at byte {self.pos} (buffer is {len(self.buf)} bytes)")

    def unpack(self, st: struct.Struct) -> tuple[object, ...]:
        end = self.pos + st.size
        self.need(end, "value")
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
        self.need(end, "string")
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
            self.need(self.pos + size, "array")
            items = [v[0] for v in st.iter_unpack(self.buf[self.pos : self.pos + size])]
            self.pos += size
            return items
        st = _SCALARS.get(vtype)
        if st is None:
            raise GGUFFormatError(f"unknown value type {vtype} at byte {self.pos}")
        return self.unpack(st)[0]  # type: ignore[return-value]


def check_gguf_header(buf: bytes | memoryview) -> None:
    """Raise :class:`GGUFFormatError` unless ``buf`` starts with a GGUF v2/v3 header (24 bytes are enough)."""
    if len(buf) < 4 or bytes(buf[:4]) != b"GGUF":
        raise GGUFFormatError("not a GGUF file (the first 4 bytes are not b'GGUF')")
    if len(buf) < GGUF_HEADER_SIZE:
        raise GGUFTruncatedError(f"truncated header ({len(buf)} of {GGUF_HEADER_SIZE} bytes)")
    version = _HEADER.unpack_from(buf)[1]
    if version not in (2, 3):
        raise GGUFFormatError(f"unsupported GGUF version {version} (expected 2 or 3, little-endian)")


def read_gguf_metadata(buf: bytes | memoryview, *, file_size: int | None = None) -> dict[str, GGUFValue]:
    """All metadata key/value pairs of a GGUF file, given (at least) the bytes up to the end of its metadata.

    ``file_size``: the size of the whole file when ``buf`` is only its start; lengths that point beyond it are
    format errors rather than :class:`GGUFTruncatedError`.
    """
    check_gguf_header(buf)
    cur = _Cursor(buf, file_size)
    cur.pos = GGUF_HEADER_SIZE
    kv_count = _HEADER.unpack_from(buf)[3]
    meta: dict[str, GGUFValue] = {}
    for _ in range(kv_count):
        at = cur.pos
        key = cur.string()
        if key in meta:
            # GGUF keys are unique (llama.cpp refuses duplicates too); zeros after a header would otherwise
            # parse as endless empty keys, read to the end of the file.
            raise GGUFFormatError(f"duplicate key {key!r} at byte {at}")
        meta[key] = cur.value(cur.u32())
    return meta
