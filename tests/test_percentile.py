"""One percentile definition (``tokenrelay._stream.percentile``), on the vectors ``web/lib/stats.js`` is checked on.

The server's log line and ``Timings``, the doctor's verdict and the load benchmark all use it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenrelay._stream import Timings, percentile
from tokenrelay.doctor import _verdict

VECTORS = json.loads((Path(__file__).parent / "vectors" / "percentile.json").read_text("utf-8"))["vectors"]


@pytest.mark.parametrize("vector", VECTORS, ids=[f"{v['values']}@{v['q']}" for v in VECTORS])
def test_percentile_on_the_shared_vectors(vector: dict[str, object]) -> None:
    values, q, expected = vector["values"], vector["q"], vector["expected"]
    assert isinstance(values, list) and isinstance(q, (int, float))
    got = percentile(values, q)
    assert got == (None if expected is None else pytest.approx(expected))


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=30), st.floats(0, 100), st.floats(0, 100))
def test_percentile_lies_within_the_values_and_grows_with_q(
    values: list[float], q1: float, q2: float
) -> None:
    low, high = sorted((q1, q2))
    a, b = percentile(values, low), percentile(values, high)
    assert a is not None and b is not None
    assert min(values) <= a <= b + 1e-9 * max(1.0, abs(b)) and b <= max(values)


def test_timings_and_the_doctor_use_it() -> None:
    gaps = (0.04, 0.05, 0.2, 0.01)
    timings = Timings(ttft=0.1, gaps=gaps, total=1.0)
    assert timings.p50 == percentile(gaps, 50) and timings.p95 == percentile(gaps, 95)
    assert _verdict._quantile(gaps, 0.9) == percentile(gaps, 90)
    assert _verdict._quantile((), 0.9) == 0.0
