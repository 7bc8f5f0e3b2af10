"""``_json_fence.FenceStripper``: the fence around a constrained JSON reply never reaches the client, at any cut."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _cuts import cuttings
from tokenrelay._errors import UseAfterFinishError
from tokenrelay._json_fence import FenceStripper


def strip(pieces: list[str]) -> tuple[str, list[str]]:
    stripper = FenceStripper()
    out = [stripper.feed(p) for p in pieces]
    out.append(stripper.finish())
    return "".join(out), out


JSON = '{\n    "name": "Zürich 🌦",\n    "n": 1\n}'


@pytest.mark.parametrize(
    ("reply", "sent"),
    [
        (f"```json\n{JSON}\n```", JSON),
        (f"```\n{JSON}\n```", JSON),
        (f"```json\n{JSON}", JSON),  # cut before its closing fence
        (JSON, JSON),  # no fence: unchanged
        ('{"a": "```"}', '{"a": "```"}'),
        ('{"a": "x\n```"}\n`', '{"a": "x\n```"}\n`'),  # a closing fence inside the text is text
        ("``", "``"),  # a partial opening at the end is text
        ("```js\n{}", "```js\n{}"),  # not an opening the grammar allows
        (f"```json\n{JSON}\n``", JSON + "\n``"),
        ("", ""),
    ],
)
def test_the_fence_is_dropped_and_the_rest_sent_at_every_cut(reply: str, sent: str) -> None:
    for pieces in cuttings(reply):
        assert strip(pieces)[0] == sent, pieces


def test_only_a_real_partial_fence_is_held() -> None:
    stripper = FenceStripper()
    assert stripper.feed("``") == ""  # may open a fence
    assert stripper.feed("`json\n{") == "{"
    assert stripper.feed('"a": 1}\n') == '"a": 1}'  # the line break may begin the closing fence
    assert stripper.feed("`x") == "\n`x"  # it did not
    assert stripper.feed("}") == "}" and stripper.finish() == ""


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list('`json\n{}" aé🙂')), max_size=40),
    st.lists(st.integers(min_value=0, max_value=40), max_size=6),
)
def test_any_text_at_any_split_equals_the_one_shot_result(text: str, cuts: list[int]) -> None:
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    assert strip(pieces)[0] == strip([text])[0]


def test_finish_twice_adds_nothing_and_feed_after_it_raises() -> None:
    stripper = FenceStripper()
    stripper.feed("```json\n{}\n```")
    assert stripper.finish() == "" and stripper.finish() == ""
    with pytest.raises(UseAfterFinishError):
        stripper.feed("x")
