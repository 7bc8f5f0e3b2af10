"""A chain of hops probed in one run (``tokenrelay doctor ORIGIN --via LB --via PUBLIC``): which hop adds the hold.

Sans-I/O, standard library only. Each URL reaches the same server through one more hop than the URL before it,
so the first URL whose stream is held names the hop that holds it: the hop between it and the URL before it.
When the first URL is already held, the hold is in the server or in front of it on that URL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from tokenrelay.doctor._report import Check, Report, Status, html_page

__all__ = ["ChainReport", "judge_chain"]

_HELD = (Status.FAIL, Status.WARN)


def _timing(report: Report) -> Check | None:
    try:
        return report.check("timing")
    except KeyError:
        return None


def _held(report: Report) -> bool:
    timing = _timing(report)
    return timing is not None and timing.status in _HELD


def _reached(report: Report) -> bool:
    return report.mode != "none"


def _compressed(report: Report) -> bool:
    try:
        return report.check("content-encoding").status is not Status.PASS
    except KeyError:
        return False


def judge_chain(reports: Sequence[Report]) -> Check:
    """The chain's verdict: the first hop that holds the stream (or cannot be reached), with its fix."""
    if not reports:
        raise ValueError("a chain has at least one hop")
    for i, report in enumerate(reports):
        where = f"hop {i + 1} ({report.url})"
        if not _reached(report):
            connect = report.checks[0]
            return Check(Status.FAIL, "chain", f"{where} did not answer: {connect.message}", connect.hop)
        if not _held(report):
            continue
        timing = _timing(report)
        assert timing is not None
        if i == 0:
            message = f"{where}, the first of the chain, already holds the stream: {timing.message}"
            hop = f"the server, or a hop in front of it on {report.url}: {timing.hop}"
        else:
            before = reports[i - 1].url
            message = f"the hold starts at {where}; hop {i} ({before}) streams: {timing.message}"
            hop = f"the hop between {before} and {report.url}: {timing.hop}"
        added = [
            f"hop {k + 1}"
            for k, r in enumerate(reports)
            if _compressed(r) and (k == 0 or not _compressed(reports[k - 1]))
        ]
        if added:
            message += f"; compression is added at {', '.join(added)}"
        return Check(timing.status, "chain", message, hop, timing.fix)
    return Check(Status.PASS, "chain", f"all {len(reports)} hops stream")


@dataclass(frozen=True)
class ChainReport:
    """One report per hop, nearest the server first, and the chain's verdict."""

    reports: Sequence[Report]
    verdict: Check

    @property
    def failed(self) -> bool:
        return self.verdict.status is Status.FAIL or any(r.failed for r in self.reports)

    @property
    def exit_status(self) -> int:
        return 1 if self.failed else 0

    def svg(self) -> str | None:
        """The picture of the first held hop (or of the last hop when none is held)."""
        held = [r for r in self.reports if _held(r)]
        return (held or list(self.reports))[0 if held else -1].svg()

    def to_json(self) -> dict[str, object]:
        return {
            "ok": not self.failed,
            "verdict": self.verdict.to_json(),
            "hops": [r.to_json() for r in self.reports],
        }

    def render_json(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False, indent=2) + "\n"

    def summary(self) -> str:
        """One line per hop and the verdict, with its hop and fix."""
        lines = ["chain (nearest the server first):"]
        for i, report in enumerate(self.reports):
            timing = _timing(report)
            state = (
                f"{timing.status.value}  {timing.message}" if timing else f"{report.checks[0].status.value}"
            )
            lines.append(f"  hop {i + 1}  {report.url}  {state}")
        lines.append(f"{self.verdict.status.value}  chain  {self.verdict.message}")
        if self.verdict.hop:
            lines.append(f"      hop: {self.verdict.hop}")
        if self.verdict.fix:
            lines.append(f"      fix: {self.verdict.fix}")
        return "\n".join(lines) + "\n"

    def render_text(self) -> str:
        parts = [report.render_text() for report in self.reports]
        return "\n".join(parts) + "\n" + self.summary() + ("FAILED\n" if self.failed else "OK\n")

    def render_html(self) -> str:
        verdict = f"<pre>{escape(self.summary())}</pre>"
        title = f"tokenrelay doctor: chain of {len(self.reports)} hops"
        return html_page(title, verdict + "\n".join(r.html_section() for r in self.reports))
