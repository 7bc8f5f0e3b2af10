"""``engines.vllm_memory`` without vLLM: the byte counts ``--kv-cache-memory-bytes`` takes, as vLLM reads them.

What the module decides against a machine's memory runs with vLLM itself, in ``tests/with_vllm``.
"""

from __future__ import annotations

import pytest

from tokenrelay.cli import build_parser
from tokenrelay.engines.vllm_memory import parse_bytes


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("1073741824", 1 << 30),
        ("2G", 2 << 30),
        ("512M", 512 << 20),
        ("1T", 1 << 40),
        ("4K", 4096),
        ("1.5g", 1_500_000_000),
        ("2k", 2000),
        (" 3G ", 3 << 30),
    ],
)
def test_byte_counts_read_as_vllm_reads_them(text: str, count: int) -> None:
    assert parse_bytes(text) == count


@pytest.mark.parametrize("text", ["", "G", "1.5G", "2GiB", "-1", "1.5", "ten"])
def test_what_is_no_byte_count_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bytes(text)


def test_the_cli_option_takes_them_and_refuses_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["serve", "--engine", "vllm", "--kv-cache-memory-bytes", "2G"])
    assert args.kv_cache_memory_bytes == 2 << 30 and args.gpu_memory_utilization is None
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", "--kv-cache-memory-bytes", "1.5G"])
    assert exit_.value.code == 2
    assert "--kv-cache-memory-bytes" in capsys.readouterr().err
