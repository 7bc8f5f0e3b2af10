"""``tokenrelay doctor URL --browser``: the doctor page (``URL/doctor``) run in headless Chromium.

Drives Chromium over the DevTools protocol (one websocket, the ``websockets`` package that uvicorn's
standard extra brings): opens the page, runs its probe with the options given, and returns what the page
computed — the lanes, one per hop after the server's write (network, parse, render, paint), and the report
the server judged from the page's recording with the CLI's own code. Chromium is Debian's
(``apt-get install chromium``) or the one ``TOKENRELAY_CHROMIUM`` names.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

from tokenrelay._errors import ConfigError

__all__ = ["chromium_path", "run_in_browser"]

_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
)


def chromium_path() -> str | None:
    """The Chromium to drive: ``$TOKENRELAY_CHROMIUM``, else the first of chromium, chromium-browser, chrome."""
    named = os.environ.get("TOKENRELAY_CHROMIUM")
    if named:
        return named if os.path.exists(named) else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class _DevTools:
    """Commands and events over one DevTools websocket (flat sessions)."""

    def __init__(self, socket: Any) -> None:
        self._socket = socket
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for raw in self._socket:
            message = json.loads(raw)
            future = self._pending.pop(message.get("id", -1), None)
            if future is not None:
                future.set_result(message)
            elif "method" in message:
                await self._events.put(message)

    async def call(
        self, method: str, params: Mapping[str, object] | None = None, session: str | None = None
    ) -> Any:
        ident = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        message: dict[str, object] = {"id": ident, "method": method, "params": dict(params or {})}
        if session is not None:
            message["sessionId"] = session
        await self._socket.send(json.dumps(message))
        reply = await future
        if "error" in reply:
            raise ConfigError(f"Chromium: {method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    async def wait_for(self, method: str) -> dict[str, Any]:
        while True:
            event = await self._events.get()
            if event["method"] == method:
                return event

    def close(self) -> None:
        self._reader.cancel()


async def _devtools_url(process: asyncio.subprocess.Process) -> str:
    assert process.stderr is not None
    while True:
        line = (await process.stderr.readline()).decode("utf-8", "replace")
        if not line:
            raise ConfigError("Chromium exited before it opened its DevTools port")
        if line.startswith("DevTools listening on "):
            return line.removeprefix("DevTools listening on ").strip()


async def run_in_browser(
    base: str,
    *,
    events: int,
    cadence_ms: float,
    seed: int | None,
    api_key: str | None,
    timeout: float,
    mode: str = "probe",
) -> dict[str, Any]:
    """Open ``{base}/doctor`` in headless Chromium, run the probe, return the page's result (JSON).

    ``mode="chat"`` traces a real chat reply instead, its model step times included (the page's chat mode)."""
    try:
        import websockets
    except ImportError as exc:  # pragma: no cover - the server extra brings it
        raise ConfigError(
            "--browser needs the websockets package (pip install 'tokenrelay[server]')"
        ) from exc
    chromium = chromium_path()
    if chromium is None:
        raise ConfigError("--browser needs Chromium (apt-get install chromium, or set TOKENRELAY_CHROMIUM)")
    options = {"events": events, "cadenceMs": cadence_ms, "seed": seed, "apiKey": api_key or "", "mode": mode}
    with tempfile.TemporaryDirectory(prefix="tokenrelay-chromium-") as profile:
        process = await asyncio.create_subprocess_exec(
            chromium,
            *_ARGS,
            f"--user-data-dir={profile}",
            "about:blank",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            url = await asyncio.wait_for(_devtools_url(process), 30.0)
            async with websockets.connect(url, max_size=None) as socket:
                tools = _DevTools(socket)
                try:
                    target = await tools.call("Target.createTarget", {"url": "about:blank"})
                    attached = await tools.call(
                        "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
                    )
                    session = attached["sessionId"]
                    await tools.call("Page.enable", session=session)
                    await tools.call("Page.navigate", {"url": f"{base}/doctor"}, session=session)
                    await asyncio.wait_for(tools.wait_for("Page.loadEventFired"), 30.0)
                    expression = (
                        f"window.tokenrelayDoctorRun({json.dumps(options)}).then(r => JSON.stringify(r))"
                    )
                    result = await asyncio.wait_for(
                        tools.call(
                            "Runtime.evaluate",
                            {"expression": expression, "awaitPromise": True, "returnByValue": True},
                            session=session,
                        ),
                        timeout,
                    )
                finally:
                    tools.close()
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), 10.0)
            if process.returncode is None:
                process.kill()
                await process.wait()
    if "exceptionDetails" in result:
        details = result["exceptionDetails"]
        raise ConfigError(
            f"the doctor page failed: {details.get('exception', {}).get('description', details)}"
        )
    value = json.loads(result["result"]["value"])
    assert isinstance(value, dict)
    return value
