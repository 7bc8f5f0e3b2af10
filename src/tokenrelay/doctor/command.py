"""``tokenrelay doctor URL``: options and the run, for ``tokenrelay.cli``'s ``COMMANDS`` list.

With ``--via URL2 --via URL3`` it probes a chain, each URL one hop further from the server than the one
before (origin, internal load balancer, public URL), and says which hop adds the hold.

Prints the PASS/WARN/FAIL table (or, with ``--json``, the report as JSON) on stdout; ``--svg`` and ``--html``
also write the timeline picture and a page holding both. Exit status: 0 when nothing failed, 1 on any FAIL
(so CI can run the doctor through its production proxy), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from tokenrelay._errors import ConfigError
from tokenrelay._urls import normalize_url
from tokenrelay.doctor._chain import ChainReport
from tokenrelay.doctor._payload import EOLS
from tokenrelay.doctor._report import Report

__all__ = ["HELP", "configure", "run"]

HELP = "check that a deployment streams: which hop holds or breaks the stream"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="the server's base URL (http://host:port, or .../v1, or either endpoint)")
    parser.add_argument(
        "--via",
        action="append",
        default=[],
        metavar="URL",
        help="the same server one hop further out (repeat: load balancer, then public URL); probes each hop "
        "in one run and names the hop that adds the hold",
    )
    parser.add_argument(
        "--browser",
        action="store_true",
        help="run the probe in headless Chromium through URL/doctor: adds the browser's lanes (parse, render, "
        "paint) to the report",
    )
    parser.add_argument("--json", action="store_true", help="write the report as JSON instead of a table")
    parser.add_argument("--svg", type=Path, metavar="PATH", help="write the timeline picture (SVG) here")
    parser.add_argument(
        "--html", type=Path, metavar="PATH", help="write a page with the table and the picture"
    )
    parser.add_argument(
        "--mode",
        choices=("auto", "diagnostics", "chat"),
        default="auto",
        help="auto: the diagnostic stream if the server has one, else a streamed chat request",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds without a byte before giving up")
    parser.add_argument(
        "-H", "--header", action="append", default=[], metavar="'NAME: VALUE'", help="extra request header"
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("TOKENRELAY_API_KEY"),
        help="sent as 'Authorization: Bearer KEY' (default: $TOKENRELAY_API_KEY)",
    )
    diag = parser.add_argument_group("diagnostic stream")
    diag.add_argument("--events", type=int, default=60, help="events (and writes) in the stream")
    diag.add_argument("--cadence-ms", type=float, default=50.0, help="time between writes")
    diag.add_argument(
        "--seed",
        type=int,
        help="seed of the random cut offsets (default: random, printed in the table to replay)",
    )
    diag.add_argument("--eol", choices=tuple(EOLS), default="crlf", help="line ends of the stream")
    diag.add_argument("--no-cancel", action="store_true", help="skip the close-mid-stream check")
    chat = parser.add_argument_group("chat request (any OpenAI-compatible endpoint)")
    chat.add_argument("--model", help="model name (default: the first of GET /v1/models)")
    chat.add_argument("--max-tokens", type=int, default=64)


def _headers(args: argparse.Namespace) -> dict[str, str]:
    headers: dict[str, str] = {}
    for item in args.header:
        name, colon, value = item.partition(":")
        if not colon or not name.strip():
            raise ConfigError(f"--header wants 'Name: value', got {item!r}")
        headers[name.strip()] = value.strip()
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    return headers


def run(args: argparse.Namespace) -> int:
    from tokenrelay.doctor.probe import DoctorOptions, run_chain, run_doctor

    if args.events < 1 or args.cadence_ms < 0:
        raise ConfigError("--events must be at least 1 and --cadence-ms not negative")
    options = DoctorOptions(
        mode=args.mode,
        events=args.events,
        cadence_ms=args.cadence_ms,
        seed=args.seed,
        eol=args.eol,
        cancel=not args.no_cancel,
        model=args.model,
        max_tokens=args.max_tokens,
        timeout=args.timeout,
        headers=_headers(args),
    )
    args.url = normalize_url(args.url)  # host:port means http://host:port
    args.via = [normalize_url(url) for url in args.via or []]
    if args.browser:
        return _run_browser(args)
    report: Report | ChainReport
    if args.via:
        report = asyncio.run(run_chain([args.url, *args.via], options))
    else:
        report = asyncio.run(run_doctor(args.url, options))
    svg = report.svg()
    if args.svg is not None and svg is not None:
        args.svg.write_text(svg, encoding="utf-8")
    if args.html is not None:
        args.html.write_text(report.render_html(), encoding="utf-8")
    _print(report.render_json() if args.json else report.render_text())
    return report.exit_status


def _run_browser(args: argparse.Namespace) -> int:
    import json

    from tokenrelay.doctor.browser import run_in_browser
    from tokenrelay.doctor.probe import endpoints

    if args.via:
        raise ConfigError("--browser probes one URL; leave out --via")
    result = asyncio.run(
        run_in_browser(
            endpoints(args.url)[0],
            events=args.events,
            cadence_ms=args.cadence_ms,
            seed=args.seed,
            api_key=args.api_key,
            timeout=args.timeout + args.events * args.cadence_ms / 1000.0,
        )
    )
    report = result["report"]
    if args.svg is not None:  # the lanes, as the page drew them
        args.svg.write_text(str(result.get("svg", "")), encoding="utf-8")
    _print(json.dumps(result, ensure_ascii=False, indent=2) + "\n" if args.json else str(report["text"]))
    return 0 if report.get("ok") else 1


def _print(text: str) -> None:
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:  # UTF-8 whatever the locale: the report quotes emoji and Devanagari
        buffer.write(text.encode("utf-8"))
        buffer.flush()
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
