"""The timeline picture: when each write left the server and when it reached the client, as an SVG.

Sans-I/O, standard library only. The picture is the relay measured rather than modelled: the top lane holds
the server's sends, the bottom lane the client's reads, and a line joins each write's send to its arrival.
Straight down is a write that went through at once; a fan of slanted lines meeting at one point is a buffer
releasing. Sends are drawn on the client's clock, shifted so that the write that crossed fastest is vertical
(the two machines' clocks are never compared directly). Without send times (an ordinary chat endpoint) only
the bottom lane is drawn.

The SVG has no XML prolog and no external references, so it can be saved as a file or put inline in HTML.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["Timeline", "render_svg"]

_W, _LEFT, _RIGHT = 960, 118, 24
_SEND_Y, _ARRIVE_Y = 64, 176
_GREEN, _AMBER, _RED, _INK, _GRID = "#2a9d4b", "#d98b00", "#d1343a", "#222", "#ddd"


@dataclass(frozen=True)
class Timeline:
    """Per item (a write, or an event without send times): aligned send time, arrival time, size; plus every
    read the client made. All in ms on the client's clock since the request was sent."""

    title: str
    sends_ms: Sequence[float | None]
    arrivals_ms: Sequence[float | None]
    sizes: Sequence[int]
    reads: Sequence[tuple[float, int]]
    headers_ms: float | None = None


def _step(span: float) -> float:
    """A round tick step giving 5 to 10 ticks over ``span`` ms."""
    raw = max(span, 1.0) / 8
    power = 10 ** math.floor(math.log10(raw))
    return float(next(m * power for m in (1, 2, 5, 10) if m * power >= raw))


def _colour(hold: float) -> str:
    return _GREEN if hold < 50 else _AMBER if hold < 250 else _RED


def render_svg(timeline: Timeline) -> str:
    """The picture as an ``<svg>`` element (a string)."""
    with_sends = any(s is not None for s in timeline.sends_ms)
    height = 262 if with_sends else 170
    arrive_y = _ARRIVE_Y if with_sends else 96
    times = [t for t in (*timeline.sends_ms, *timeline.arrivals_ms) if t is not None]
    times += [t for t, _ in timeline.reads]
    end = max(times, default=1.0) * 1.02 + 1.0
    scale = (_W - _LEFT - _RIGHT) / end

    def x(t: float) -> str:
        return f"{_LEFT + t * scale:.1f}"

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {height}" width="{_W}" height="{height}" '
        f'role="img" font-family="system-ui, sans-serif" font-size="12">',
        f"<title>{escape(timeline.title)}</title>",
        f'<rect width="{_W}" height="{height}" fill="#fff"/>',
        f'<text x="{_LEFT}" y="20" font-size="14" fill="{_INK}">{escape(timeline.title)}</text>',
    ]
    step = _step(end)
    axis_y = height - (44 if with_sends else 28)
    tick = 0.0
    while tick <= end:
        out.append(f'<line x1="{x(tick)}" y1="34" x2="{x(tick)}" y2="{axis_y}" stroke="{_GRID}"/>')
        out.append(
            f'<text x="{x(tick)}" y="{axis_y + 16}" text-anchor="middle" fill="#555">{tick:g} ms</text>'
        )
        tick += step
    lanes = [(arrive_y, "client received")]
    if with_sends:
        lanes.insert(0, (_SEND_Y, "server sent"))
    for y, label in lanes:
        out.append(f'<line x1="{_LEFT}" y1="{y}" x2="{_W - _RIGHT}" y2="{y}" stroke="#999"/>')
        out.append(f'<text x="{_LEFT - 8}" y="{y + 4}" text-anchor="end" fill="{_INK}">{label}</text>')
    if timeline.headers_ms is not None:
        hx = x(timeline.headers_ms)
        out.append(f'<line x1="{hx}" y1="{arrive_y - 22}" x2="{hx}" y2="{arrive_y + 22}" stroke="#66f"/>')
        out.append(f'<text x="{hx}" y="{arrive_y + 36}" text-anchor="middle" fill="#66f">headers</text>')
    biggest = max((size for _, size in timeline.reads), default=1) or 1
    for at, size in timeline.reads:
        h = 4 + 16 * math.sqrt(size / biggest)
        out.append(
            f'<rect x="{x(at)}" y="{arrive_y:.1f}" width="2" height="{h:.1f}" fill="{_INK}">'
            f"<title>read at {at:.1f} ms: {size} B</title></rect>"
        )
    stack, previous = (
        0,
        None,
    )  # items arriving at the same moment are stacked upwards, so a burst shows its size
    for i, (sent, arrived) in enumerate(zip(timeline.sends_ms, timeline.arrivals_ms, strict=True)):
        size = timeline.sizes[i]
        stack = stack + 1 if arrived is not None and arrived == previous else 0
        previous = arrived
        if sent is not None:
            out.append(
                f'<line x1="{x(sent)}" y1="{_SEND_Y - 8}" x2="{x(sent)}" y2="{_SEND_Y}" stroke="{_INK}"/>'
            )
        if sent is not None and arrived is not None:
            hold = arrived - sent
            out.append(
                f'<line x1="{x(sent)}" y1="{_SEND_Y}" x2="{x(arrived)}" y2="{arrive_y}" '
                f'stroke="{_colour(hold)}" stroke-width="1.3" opacity="0.8">'
                f"<title>write {i}: {size} B, sent {sent:.1f} ms, arrived {arrived:.1f} ms, "
                f"held {hold:.1f} ms</title></line>"
            )
        elif arrived is not None:
            out.append(
                f'<circle cx="{x(arrived)}" cy="{arrive_y - 6 - 5 * min(stack, 12)}" r="2.5" fill="{_GREEN}">'
                f"<title>event {i}: {size} B at {arrived:.1f} ms</title></circle>"
            )
        elif sent is not None:
            out.append(
                f'<circle cx="{x(sent)}" cy="{_SEND_Y + 6}" r="3" fill="{_RED}">'
                f"<title>write {i}: never arrived</title></circle>"
            )
    if with_sends:
        out.append(
            f'<text x="{_LEFT}" y="{height - 4}" fill="#555"><tspan fill="{_GREEN}">■ held under 50 ms</tspan>'
            f'  <tspan fill="{_AMBER}">■ under 250 ms</tspan>  <tspan fill="{_RED}">■ longer</tspan>'
            "  · bars: client reads, height by size</text>"
        )
    out.append("</svg>")
    return "\n".join(out)
