"""The doctor's findings and their three renderings: a terminal table, JSON, and an HTML page with the picture.

Sans-I/O, standard library only. A :class:`Check` is one line of the table: a status, a short name, what was
measured, and for a problem the *hop* it points to and the *fix*. The report fails when any check fails.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from html import escape

from tokenrelay.doctor._timeline import Timeline, render_svg

__all__ = ["Check", "Report", "Status", "html_page"]


class Status(str, Enum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    INFO = "INFO"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Check:
    status: Status
    name: str
    message: str
    hop: str | None = None
    fix: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {
            "status": self.status.value,
            "check": self.name,
            "message": self.message,
            "hop": self.hop,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class Report:
    """Everything the doctor found about one endpoint. ``facts`` are the raw numbers, for ``--json``."""

    url: str
    mode: str  # "diagnostics" (tokenrelay's diagnostic stream) or "chat" (an ordinary streamed chat request)
    checks: Sequence[Check]
    timeline: Timeline | None = None
    facts: Mapping[str, object] = field(default_factory=dict)
    version: str | None = None  # tokenrelay's, filled in by the probe
    time: str | None = None  # when the run started, ISO 8601 UTC, filled in by the probe

    @property
    def failed(self) -> bool:
        return any(check.status is Status.FAIL for check in self.checks)

    @property
    def exit_status(self) -> int:
        """0 when nothing failed, 1 otherwise (for the command line and CI)."""
        return 1 if self.failed else 0

    def check(self, name: str) -> Check:
        """The first check called ``name`` (KeyError if there is none)."""
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(name)

    def to_json(self) -> dict[str, object]:
        return {
            "url": self.url,
            "mode": self.mode,
            "version": self.version,
            "time": self.time,
            "ok": not self.failed,
            "checks": [check.to_json() for check in self.checks],
            "facts": dict(self.facts),
        }

    def svg(self) -> str | None:
        return render_svg(self.timeline) if self.timeline is not None else None

    def render_text(self) -> str:
        """The terminal table: one line per check, each problem followed by its hop and fix."""
        width = max((len(check.name) for check in self.checks), default=0)
        lines = [f"tokenrelay doctor {self.url}  ({self.mode}{self._stamp(', ')})"]
        for check in self.checks:
            lines.append(f"{check.status.value}  {check.name.ljust(width)}  {check.message}")
            pad = " " * (6 + width + 2)
            if check.hop:
                lines.append(f"{pad}hop: {check.hop}")
            if check.fix:  # a list of candidates ("a | b | c") gets a line each
                head, *rest = check.fix.split(" | ")
                lines.append(f"{pad}fix: {head}")
                lines.extend(f"{pad}     {item}" for item in rest)
        counts = {s: sum(1 for c in self.checks if c.status is s) for s in Status}
        summary = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n)
        lines.append(f"{'FAILED' if self.failed else 'OK'}: {summary}")
        return "\n".join(lines) + "\n"

    def _stamp(self, sep: str) -> str:
        parts = [f"tokenrelay {self.version}" if self.version else "", self.time or ""]
        return "".join(sep + part for part in parts if part)

    def render_json(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False, indent=2) + "\n"

    def render_html(self) -> str:
        """A self-contained page: target, version and time, the table, the timeline picture inline, and the
        facts as JSON."""
        return html_page(f"tokenrelay doctor {self.url}", self.html_section())

    def html_section(self) -> str:
        """The page's body for this report (a chain's page holds one per hop)."""
        rows = []
        for check in self.checks:
            detail = escape(check.message)
            if check.hop:
                detail += f"<br><b>hop</b>: {escape(check.hop)}"
            if check.fix:
                detail += f"<br><b>fix</b>: {escape(check.fix)}"
            rows.append(
                f'<tr class="{check.status.value.lower()}"><td>{check.status.value}</td>'
                f"<td>{escape(check.name)}</td><td>{detail}</td></tr>"
            )
        svg = self.svg() or ""
        facts = escape(json.dumps(dict(self.facts), ensure_ascii=False, indent=2))
        return f"""<section>
<h2>{escape(self.url)}</h2>
<p class="meta">{"FAILED" if self.failed else "OK"} · target: <code>{escape(self.url)}</code> · mode: \
{escape(self.mode)}{escape(self._stamp(" · "))}</p>
<table>{"".join(rows)}</table>
{svg}
<details><summary>measurements</summary><pre>{facts}</pre></details>
</section>"""


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5rem; }
td { padding: .35rem .7rem; border-bottom: 1px solid #eee; vertical-align: top; }
tr td:first-child { font-weight: bold; font-family: monospace; }
tr.pass td:first-child { color: #2a9d4b; } tr.warn td:first-child { color: #d98b00; }
tr.fail td:first-child { color: #d1343a; } tr.info td:first-child, tr.skip td:first-child { color: #777; }
pre { background: #f6f6f6; padding: 1rem; overflow: auto; }
"""


def html_page(title: str, body: str) -> str:
    """A whole HTML page around ``body`` (one or more report sections)."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>{_STYLE}</style></head><body>
<h1>{escape(title)}</h1>
{body}
</body></html>
"""
