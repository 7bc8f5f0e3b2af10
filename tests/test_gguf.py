"""The GGUF metadata reader agrees with the `gguf` package and fails cleanly on any truncation."""

from __future__ import annotations

import contextlib
import random
import struct
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenrelay import TokenizerError, load_tokenizer
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


# -- a file that is not a GGUF model is refused after reading its header (one buffer: 4 KiB) ----------------------


def bytes_read_by_this_process() -> int:
    # Linux's per-process I/O accounting: rchar counts every byte returned by read() calls.
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def sparse_file(path: Path, head: bytes, size: int) -> Path:
    with path.open("wb") as f:
        f.write(head)
        f.truncate(size)  # a hole: no disk used, but reading it whole would return `size` bytes
    return path


def gguf_header(kv_count: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 0, kv_count)


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io")
@pytest.mark.parametrize(
    ("head", "error", "most"),
    [
        (b"PK\x03\x04 not a model at all", "not a GGUF file", 1 << 16),
        (b"GGUF" + struct.pack("<IQQ", 99, 0, 1), "unsupported GGUF version 99", 1 << 16),
        # A GGUF header whose first key claims a length of 1 TB: past the end of the file, refused at once.
        (gguf_header(1) + struct.pack("<Q", 1 << 40), "past the end of the file", 9 << 20),
        # A header, one key, then zeros: they would parse as endless empty keys; the second one is refused.
        (
            gguf_header(1 << 40) + struct.pack("<Q", 1) + b"k" + struct.pack("<IB", 0, 7),
            "duplicate key",
            9 << 20,
        ),
    ],
    ids=["zip", "version", "huge-length", "zeros"],
)
def test_non_gguf_file_is_refused_without_reading_it_whole(
    tmp_path: Path, head: bytes, error: str, most: int
) -> None:
    size = 200 << 20
    path = sparse_file(tmp_path / "model.gguf", head, size)
    with pytest.raises(TokenizerError):  # warm up: imports read files too, and must not count
        load_tokenizer(sparse_file(tmp_path / "empty.gguf", b"", 0))
    before = bytes_read_by_this_process()
    with pytest.raises(TokenizerError, match=error):
        load_tokenizer(path)
    read = bytes_read_by_this_process() - before
    # Before: every one of these read the file in growing chunks to its end (8 + 32 + 128 + 200 MB).
    assert read <= most, f"read {read} bytes of a {size}-byte file to refuse it"
