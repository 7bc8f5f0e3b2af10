"""The GGUF metadata reader agrees with the `gguf` package and fails cleanly on any truncation."""

from __future__ import annotations

import contextlib
import random
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenrelay._gguf import GGUFFormatError, read_gguf_metadata
from tokenrelay.tokenizers import smollm2_gguf_path


@pytest.fixture(scope="module")
def smollm2_bytes() -> bytes:
    return smollm2_gguf_path().read_bytes()[:4_000_000]  # the metadata ends well before 4 MB


def test_agrees_with_gguf_reader_and_is_faster(smollm2_bytes: bytes) -> None:
    gguf = pytest.importorskip("gguf")
    t0 = time.perf_counter()
    reference = gguf.GGUFReader(str(smollm2_gguf_path()))
    t1 = time.perf_counter()
    ours = read_gguf_metadata(smollm2_bytes)
    t2 = time.perf_counter()
    for key, field in reference.fields.items():
        if key.startswith("GGUF."):
            continue  # the reader's own header pseudo-fields
        want = field.contents()
        got = ours[key]
        if isinstance(want, float):
            assert got == pytest.approx(want)
        else:
            assert got == want, key
    assert set(ours) == {k for k in reference.fields if not k.startswith("GGUF.")}
    # Not a timing assertion on absolute numbers: just that the reason this module exists still holds.
    print(f"GGUFReader {t1 - t0:.2f}s, read_gguf_metadata {t2 - t1:.3f}s")


def test_every_truncation_is_a_format_error(smollm2_bytes: bytes) -> None:
    meta_end = 0
    # find where the metadata ends: the smallest prefix that parses
    lo, hi = 0, len(smollm2_bytes)
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            read_gguf_metadata(smollm2_bytes[:mid])
            hi = mid
        except GGUFFormatError:
            lo = mid + 1
    meta_end = lo
    rng = random.Random(11)
    cuts = [*range(0, 64), *(rng.randrange(meta_end) for _ in range(300)), meta_end - 1]
    for cut in cuts:
        with pytest.raises(GGUFFormatError):
            read_gguf_metadata(smollm2_bytes[:cut])


def test_scalars_strings_and_arrays() -> None:
    def s(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    body = (
        s("a.u32")
        + struct.pack("<II", 4, 7)
        + s("a.bool")
        + struct.pack("<I?", 7, True)
        + s("a.str")
        + struct.pack("<I", 8)
        + s("chai ☕")
        + s("a.arr")
        + struct.pack("<IIQ", 9, 5, 3)
        + struct.pack("<3i", -1, 0, 1)
        + s("a.f64")
        + struct.pack("<Id", 12, 2.5)
    )
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 5) + body
    assert read_gguf_metadata(data) == {
        "a.u32": 7,
        "a.bool": True,
        "a.str": "chai ☕",
        "a.arr": [-1, 0, 1],
        "a.f64": 2.5,
    }
    with pytest.raises(GGUFFormatError, match="not a GGUF"):
        read_gguf_metadata(b"GGML" + data[4:])
    with pytest.raises(GGUFFormatError, match="version"):
        read_gguf_metadata(b"GGUF" + struct.pack("<IQQ", 99, 0, 0))
    with pytest.raises(GGUFFormatError, match="unknown value type"):
        read_gguf_metadata(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<I", 77))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_any_bytes_parse_or_raise_format_error(data: bytes) -> None:
    for blob in (data, b"GGUF" + struct.pack("<I", 3) + data):
        with contextlib.suppress(GGUFFormatError):
            read_gguf_metadata(blob)
