"""The doctor: find which hop holds or breaks a stream in a real deployment.

``tokenrelay doctor URL`` streams through the deployment as a client would and reports PASS/WARN/FAIL lines,
each problem with the hop it points to and the fix. Against a tokenrelay server it reads the diagnostic
stream (``tokenrelay.server.diagnostics``): known bytes cut at seeded random offsets into timed writes, so
every byte and every write's hold is checked; against any other OpenAI-compatible endpoint it sends an
ordinary streamed chat request.

Layout: ``_payload`` (what the diagnostic stream sends), ``_recording`` (what the probe saw), ``_verdict``
(timing: streaming, bursts, lump, initial hold), ``_checks`` and ``_diagnose`` (recordings → checks),
``_report`` and ``_timeline`` (table, JSON, HTML, SVG) are sans-I/O; ``probe`` is the httpx shell
(``from tokenrelay.doctor.probe import run_doctor``). This package imports no network module itself.
"""

from tokenrelay.doctor._payload import DiagnosticPlan, Schedule
from tokenrelay.doctor._report import Check, Report, Status
from tokenrelay.doctor._verdict import Relay, RelayKind, judge_arrivals, judge_relay

__all__ = [
    "Check",
    "DiagnosticPlan",
    "Relay",
    "RelayKind",
    "Report",
    "Schedule",
    "Status",
    "judge_arrivals",
    "judge_relay",
]
