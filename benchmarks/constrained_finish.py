"""Constrained replies that finish (issue 33): tokenrelay's JSON layouts against llama.cpp's llama-server.

The same 42 requests (7 kinds × 6 prompts) go to each server, at temperature 0 and 0.7 (a seed per prompt),
on the same SmolLM2-135M-Instruct GGUF. The servers run at once (what is counted does not depend on speed):

- ``tokenrelay-<layout>``: ``tokenrelay serve`` with ``_json_grammar.LAYOUT`` (``response_format``; tool calls keep
  ``TOOL_LAYOUT``) set to each layout
  (``compact``: no whitespace; ``pretty``: llama.cpp's ``space`` rule), numbers bounded in both;
- ``llama-server``: ``--jinja`` with the GGUF's own template, for the JSON requests (``response_format``,
  which it turns into its GBNF grammar);
- ``llama-server-tools``: ``--jinja --chat-template-file tests/data/llama-server-tools.jinja`` (SmolLM2's
  template has no tools; this one, written for the tests, renders them), for the tool requests.

Kinds: cities, recipes, people, tags (``json_schema``), nested objects (a book with its author), a
``json_object`` free form, and tool arguments (six tools offered, ``tool_choice: "required"``). A JSON reply
*finished* if ``finish_reason`` is ``"stop"`` within ``max_tokens``, and is *valid* if it parses and
validates against its schema (``jsonschema``; an object for ``json_object``). A tool reply finished if
``finish_reason`` is ``"tool_calls"``, and is valid if every call names an offered tool, its arguments
validate, and no call repeats an identical earlier one (a repeated call is no finished reply). Tokens per
finished reply: ``usage.completion_tokens`` averaged over the finished ones.

    python benchmarks/constrained_finish.py [--llama-server PATH] [--layouts compact pretty] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

from engine_concurrency import running  # noqa: E402  # start a server, wait for /health, stop it

DEFAULT_LLAMA_SERVER = Path.home() / ".cache" / "tokenrelay" / "llama-server" / "llama-server"
TOOLS_TEMPLATE = ROOT / "tests" / "data" / "llama-server-tools.jinja"

CITY = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "country": {"type": "string", "maxLength": 40},
        "population": {"type": "integer"},
    },
    "required": ["name", "country", "population"],
    "additionalProperties": False,
}
RECIPE = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "servings": {"type": "integer"},
        "ingredients": {"type": "array", "items": {"type": "string"}},
        "minutes": {"type": "number"},
    },
    "required": ["name", "servings", "ingredients", "minutes"],
    "additionalProperties": False,
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "occupation": {"type": "string"},
        "nationality": {"type": "string"},
    },
    "required": ["name", "age", "occupation"],
    "additionalProperties": False,
}
TAGS = {
    "type": "object",
    "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["tags"],
    "additionalProperties": False,
}
BOOK = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "year": {"type": "integer"},
        "author": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "born": {"type": "integer"}},
            "required": ["name", "born"],
            "additionalProperties": False,
        },
        "genres": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["title", "year", "author", "genres"],
    "additionalProperties": False,
}


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties, "required": required}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


TOOLS = [
    _tool(
        "get_weather",
        "Get the current weather in a city",
        {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        ["city", "unit"],
    ),
    _tool("search_web", "Search the web", {"query": {"type": "string"}}, ["query"]),
    _tool("set_timer", "Set a timer", {"minutes": {"type": "integer"}}, ["minutes"]),
    _tool(
        "send_email",
        "Send an email",
        {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
        ["to", "subject", "body"],
    ),
    _tool(
        "convert_currency",
        "Convert an amount of money",
        {"amount": {"type": "number"}, "from": {"type": "string"}, "to": {"type": "string"}},
        ["amount", "from", "to"],
    ),
    _tool(
        "book_table",
        "Book a table at a restaurant",
        {"restaurant": {"type": "string"}, "people": {"type": "integer"}, "time": {"type": "string"}},
        ["restaurant", "people", "time"],
    ),
]
TOOL_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

KINDS: dict[str, tuple[dict[str, Any] | None, list[str]]] = {
    "cities": (
        CITY,
        [
            "Tell me about Paris as JSON.",
            "Tell me about Tokyo as JSON.",
            "Tell me about Москва as JSON.",
            "Tell me about Zürich as JSON.",
            "Tell me about São Paulo as JSON.",
            "Tell me about القاهرة as JSON.",
        ],
    ),
    "recipes": (
        RECIPE,
        [
            "A recipe for pancakes, as JSON.",
            "A recipe for tomato soup, as JSON.",
            "A recipe for guacamole, as JSON.",
            "A recipe for fried rice, as JSON.",
            "A recipe for banana bread, as JSON.",
            "A recipe for lemonade, as JSON.",
        ],
    ),
    "people": (
        PERSON,
        [
            "Describe Marie Curie as JSON.",
            "Describe a firefighter named Tom as JSON.",
            "Describe Albert Einstein as JSON.",
            "Describe a young teacher as JSON.",
            "Describe Frida Kahlo as JSON.",
            "Describe your best friend as JSON.",
        ],
    ),
    "tags": (
        TAGS,
        [
            "Tags for a blog post about baking bread, as JSON.",
            "Tags for a photo of a beach at sunset, as JSON.",
            "Tags for a video about learning Python, as JSON.",
            "Tags for a news article about elections, as JSON.",
            "Tags for a song about summer love, as JSON.",
            "Tags for a recipe of vegan chili, as JSON.",
        ],
    ),
    "nested": (
        BOOK,
        [
            "Describe the book Dune as JSON.",
            "Describe the book Pride and Prejudice as JSON.",
            "Describe the book 1984 as JSON.",
            "Describe the book The Hobbit as JSON.",
            "Describe the book Don Quixote as JSON.",
            "Describe a book you like as JSON.",
        ],
    ),
    "json_object": (
        None,
        [
            "List three colours as JSON.",
            "Give me a shopping list as JSON.",
            "Describe a cat as JSON.",
            "The days of the week as JSON.",
            "Three facts about the Moon as JSON.",
            "A to-do list for Monday as JSON.",
        ],
    ),
    "tools": (
        None,
        [
            "Weather in Zürich, celsius, please 🌦",
            "Search the web for the best pizza in Naples.",
            "Set a timer for 12 minutes.",
            "Email bob@example.com that the meeting moved to 3pm.",
            "How much is 250 dollars in euros?",
            "Book a table for 4 at Luigi's at 8pm.",
        ],
    ),
}


@dataclass
class Server:
    name: str
    argv: list[str]
    url: str
    kinds: set[str]
    extra: dict[str, Any] = field(default_factory=dict)  # added to every request
    env: dict[str, str] = field(default_factory=dict)  # added to the server's environment (ec.running)


@dataclass
class Outcome:
    kind: str
    temperature: float
    finished: bool
    valid: bool
    tokens: int
    text: str = ""


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)

    def row(self, tools: bool, temperature: float) -> tuple[int, int, int, float]:
        chosen = [o for o in self.outcomes if (o.kind == "tools") == tools and o.temperature == temperature]
        done = [o for o in chosen if o.finished]
        per = statistics.mean(o.tokens for o in done) if done else float("nan")
        return len(chosen), len(done), sum(o.valid for o in done), per


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def servers(args: argparse.Namespace) -> list[Server]:
    out = []
    for layout in args.layouts:
        port = free_port()
        launcher = (
            "import sys, tokenrelay._json_grammar as g; g.LAYOUT = sys.argv.pop(1); "
            "from tokenrelay.cli import main; raise SystemExit(main(sys.argv[1:]))"
        )
        argv = [sys.executable, "-c", launcher, layout, "serve", "--port", str(port)]
        argv += ["--parallel", str(args.parallel), "--threads", str(args.threads), "--log-level", "warning"]
        out.append(Server(f"tokenrelay-{layout}", argv, f"http://127.0.0.1:{port}", set(KINDS)))
    if args.llama_server.is_file():
        from tokenrelay.engines.llamacpp import resolve_model_path

        model = str(resolve_model_path("smollm2"))
        for name, extra, kinds in (
            ("llama-server", [], set(KINDS) - {"tools"}),
            ("llama-server-tools", ["--chat-template-file", str(TOOLS_TEMPLATE)], {"tools"}),
        ):
            port = free_port()
            argv = [
                str(args.llama_server),
                "-m",
                model,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--jinja",
            ]
            argv += ["--parallel", str(args.parallel), "-c", str(2048 * args.parallel)]
            argv += ["-t", str(args.threads), "-tb", str(args.threads), "--no-webui", *extra]
            # OpenAI's sampling (temperature and top_p only), as tokenrelay samples, unless --llama-defaults:
            # llama-server's own defaults add top_k 40 and min_p 0.05, which cut the tail at temperature 0.7.
            extra = {} if args.llama_defaults else {"top_k": 0, "min_p": 0.0}
            out.append(Server(name, argv, f"http://127.0.0.1:{port}", kinds, extra))
    else:
        print(f"(no llama-server at {args.llama_server}: `make llama-server`; tokenrelay alone below)")
    return out


def body(kind: str, prompt: str, temperature: float, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    schema, _ = KINDS[kind]
    request: dict[str, Any] = {
        "messages": [{"role": "user", "content": prompt}],
        "temperature": temperature,
        "top_p": 1.0,
        "seed": seed,
        "max_tokens": args.tool_tokens if kind == "tools" else args.json_tokens,
    }
    if kind == "tools":
        request |= {"tools": TOOLS, "tool_choice": "required"}
    elif schema is None:
        request["response_format"] = {"type": "json_object"}
    else:
        request["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": kind, "schema": schema, "strict": True},
        }
    return request


def judge(kind: str, temperature: float, reply: dict[str, Any]) -> Outcome:
    choice = reply["choices"][0]
    message = choice["message"]
    tokens = int(reply["usage"]["completion_tokens"])
    reason = choice["finish_reason"]
    if kind == "tools":
        calls = message.get("tool_calls") or []
        seen: set[tuple[str, str]] = set()
        valid = bool(calls)
        for call in calls:
            name, text = call["function"]["name"], call["function"]["arguments"]
            try:
                arguments = json.loads(text)
                jsonschema.validate(arguments, TOOL_SCHEMAS[name])
            except (ValueError, KeyError, jsonschema.ValidationError):
                valid = False
                continue
            key = (name, json.dumps(arguments, sort_keys=True))
            if key in seen:  # the same call again: not a finished reply
                valid = False
            seen.add(key)
        finished = reason == "tool_calls" and valid
        return Outcome(kind, temperature, finished, valid, tokens, json.dumps(calls, ensure_ascii=False))
    text = message.get("content") or ""
    schema, _ = KINDS[kind]
    try:
        value = json.loads(text)
        if schema is None:
            valid = isinstance(value, dict)
        else:
            jsonschema.validate(value, schema)
            valid = True
    except (ValueError, jsonschema.ValidationError):
        valid = False
    return Outcome(kind, temperature, reason == "stop", valid, tokens, text)


async def run_server(server: Server, args: argparse.Namespace) -> Tally:
    tally = Tally()
    gate = asyncio.Semaphore(args.parallel)
    async with httpx.AsyncClient(timeout=600) as client:

        async def one(kind: str, i: int, prompt: str, temperature: float) -> None:
            async with gate:
                r = await client.post(
                    server.url + "/v1/chat/completions",
                    json=body(kind, prompt, temperature, 1000 + i, args) | server.extra,
                )
                if r.status_code != 200:
                    raise SystemExit(f"{server.name}: {r.status_code} {r.text[:500]}")
                tally.outcomes.append(judge(kind, temperature, r.json()))
                outcome = tally.outcomes[-1]
                print(
                    f"{server.name} {kind} {i} t={temperature:g}: finished={outcome.finished} "
                    f"valid={outcome.valid} tokens={outcome.tokens}",
                    flush=True,
                )

        jobs = [
            one(kind, i, prompt, temperature)
            for temperature in args.temperatures
            for kind, (_, prompts) in KINDS.items()
            if kind in server.kinds
            for i, prompt in enumerate(prompts)
        ]
        await asyncio.gather(*jobs)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER)
    parser.add_argument("--layouts", nargs="+", default=["compact", "pretty"])
    parser.add_argument("--temperatures", nargs="+", type=float, default=[0.0, 0.7])
    parser.add_argument("--json-tokens", type=int, default=300, help="max_tokens of a JSON request")
    parser.add_argument("--tool-tokens", type=int, default=120, help="max_tokens of a tool request")
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument(
        "--llama-defaults", action="store_true", help="llama-server samples with its own top_k/min_p defaults"
    )
    parser.add_argument("--threads", type=int, default=1, help="per server")
    parser.add_argument("--out", type=Path, help="write every reply and verdict here (JSON)")
    args = parser.parse_args()
    chosen = servers(args)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        for server in chosen:  # all up at once: the counts do not depend on timing, only the wall clock does
            stack.enter_context(running(server))  # type: ignore[arg-type]  # same fields
        print(f"{len(chosen)} servers up in {time.monotonic() - started:.0f} s", flush=True)

        async def everything() -> list[Tally]:
            return await asyncio.gather(*(run_server(server, args) for server in chosen))

        tallies = dict(zip((s.name for s in chosen), asyncio.run(everything()), strict=True))
    print(f"all replies in {time.monotonic() - started:.0f} s", flush=True)
    llama = Tally(
        tallies.get("llama-server", Tally()).outcomes + tallies.get("llama-server-tools", Tally()).outcomes
    )
    rows = {name: t for name, t in tallies.items() if name.startswith("tokenrelay")}
    if llama.outcomes:
        rows["llama-server"] = llama
    print()
    print(
        "| server | temp | JSON finished / valid (of n) | tokens / finished | tools finished / valid (of n) | tokens / finished |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, tally in rows.items():
        for temperature in args.temperatures:
            n, done, valid, per = tally.row(False, temperature)
            tn, tdone, tvalid, tper = tally.row(True, temperature)
            print(
                f"| {name} | {temperature:g} | {done} / {valid} ({n}) | {per:.1f} | {tdone} / {tvalid} ({tn}) "
                f"| {tper:.1f} |"
            )
    if llama.outcomes:
        print()
        for name, tally in rows.items():
            if name == "llama-server":
                continue
            for temperature in args.temperatures:
                _, done, _, per = tally.row(False, temperature)
                _, ldone, _, lper = llama.row(False, temperature)
                _, tdone, _, tper = tally.row(True, temperature)
                _, ltdone, _, ltper = llama.row(True, temperature)
                print(
                    f"{name} t={temperature:g}: JSON finished {done} vs {ldone}, tokens/finished "
                    f"{per / lper:.2f}×; tools finished {tdone} vs {ltdone}, tokens/finished {tper / ltper:.2f}×"
                )
    if args.out:
        dump = {name: [o.__dict__ for o in tally.outcomes] for name, tally in tallies.items()}
        args.out.write_text(json.dumps(dump, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
