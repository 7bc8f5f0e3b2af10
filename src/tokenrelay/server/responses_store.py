"""Stored responses of the Responses API: ``previous_response_id``, ``GET`` and ``DELETE /v1/responses/{id}``.

As users expect from OpenAI, ``store`` defaults to true: a response that ended (``completed`` or
``incomplete``; never one that failed or whose client left mid-stream, so nothing half-done reads as complete)
is kept with the conversation that led to it (this request's input and the stored turns before it, the
instructions left out, as OpenAI leaves them) and its output. A later request names it with
``previous_response_id`` and continues from there.

Kept in memory, never written to disk, bounded by a count and a byte budget (the response's JSON and its
conversation's): the oldest are evicted first. An unknown, evicted or deleted id is a 404 in OpenAI's error
shape naming it. With ``serve --workers N`` each worker process keeps its own store: a response is found only
by the worker that made it, and any other answers that 404, whose message says so (the kernel spreads
connections over the workers, so continue a conversation on one worker, or run one worker, to rely on it).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from tokenrelay._errors import NotFoundError

from .requests import Generation
from .responses_request import ResponsesRequest, assemble

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_RESPONSES", "ResponseStore", "add_response_routes"]

DEFAULT_MAX_RESPONSES = 1000
DEFAULT_MAX_BYTES = 64 << 20  # 64 MiB


def output_turns(response: Mapping[str, Any]) -> list[dict[str, object]]:
    """A response's output as chat-shaped turns: its messages' text and its calls (reasoning is left out)."""
    turns: list[dict[str, object]] = []
    for item in response.get("output", ()):
        kind = item.get("type")
        if kind == "message":
            text = "".join(
                p.get("text", "") for p in item.get("content", ()) if p.get("type") == "output_text"
            )
            turns.append({"role": "assistant", "content": text})
        elif kind == "function_call":
            raw = item.get("arguments", "")
            try:
                arguments: object = json.loads(raw) if raw.strip() else {}
            except ValueError:
                arguments = raw
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": arguments},
            }
            last = turns[-1] if turns else None
            if last is not None and last["role"] == "assistant":
                calls = last.setdefault("tool_calls", [])
                assert isinstance(calls, list)
                calls.append(call)
                last["content"] = last["content"] or None
            else:
                turns.append({"role": "assistant", "content": None, "tool_calls": [call]})
    return turns


class _Entry:
    __slots__ = ("body", "size", "turns")

    def __init__(self, body: bytes, turns: Sequence[Mapping[str, object]]) -> None:
        self.body = body
        self.turns = tuple(turns)
        self.size = len(body) + len(json.dumps(self.turns, ensure_ascii=False, default=str).encode())


class ResponseStore:
    """Responses by id, oldest evicted first beyond ``max_responses`` or ``max_bytes``."""

    def __init__(
        self, max_responses: int = DEFAULT_MAX_RESPONSES, max_bytes: int = DEFAULT_MAX_BYTES, workers: int = 1
    ) -> None:
        self.max_responses, self.max_bytes, self.workers = max_responses, max_bytes, workers
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # intake resolves on its thread pool; responses end on the event loop

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def put(self, response: Mapping[str, Any], conversation: Sequence[Mapping[str, object]]) -> None:
        body = json.dumps(response, ensure_ascii=False, separators=(",", ":")).encode()
        entry = _Entry(body, [*conversation, *output_turns(response)])
        if entry.size > self.max_bytes or self.max_responses < 1:
            return  # larger than the whole budget: not kept (a later GET is a 404 naming it)
        with self._lock:
            old = self._entries.pop(response["id"], None)
            if old is not None:
                self._bytes -= old.size
            self._entries[response["id"]] = entry
            self._bytes += entry.size
            while len(self._entries) > self.max_responses or self._bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.size

    def _missing(self, id: str, param: str | None) -> NotFoundError:
        where = ""
        if self.workers > 1:
            where = (
                f"; this server runs {self.workers} worker processes, each keeping the responses it made, "
                "and this request reached another one"
            )
        return NotFoundError(
            f"no response with id {id!r} is stored here (unknown, evicted or deleted{where})",
            param=param,
            code="response_not_found",
        )

    def get(self, id: str, param: str | None = None) -> _Entry:
        with self._lock:
            entry = self._entries.get(id)
        if entry is None:
            raise self._missing(id, param)
        return entry

    def delete(self, id: str) -> None:
        with self._lock:
            entry = self._entries.pop(id, None)
            if entry is not None:
                self._bytes -= entry.size
        if entry is None:
            raise self._missing(id, None)

    def resolve(self, gen: Generation) -> Generation:
        """A parsed ``/v1/responses`` request with its stored conversation put first (``previous_response_id``)
        and, when it is to be stored, the writer's ``keep`` set (intake calls this before tokenizing)."""
        request = gen.extra
        assert isinstance(request, ResponsesRequest)
        if request.previous_response_id is not None:
            entry = self.get(request.previous_response_id, "previous_response_id")
            request = dataclasses.replace(request, history=entry.turns)
            gen = dataclasses.replace(gen, prompt=assemble(request), extra=request)
        if request.store:
            conversation = [*request.history, *request.turns]

            def keep(response: dict[str, Any]) -> None:
                self.put(response, conversation)

            request.keep = keep
        return gen


_NOT_STORED = {
    "description": "No response with this id is stored (unknown, evicted, deleted, or kept by another worker)",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}},
}


def add_response_routes(app: FastAPI, store: ResponseStore) -> None:
    """``GET`` and ``DELETE /v1/responses/{response_id}``.

    One route answers both, so a 405 lists both in ``Allow``; the two declared after it (never reached) give
    the OpenAPI document one operation each."""

    async def get_response(response_id: str) -> Response:
        return Response(store.get(response_id).body, media_type="application/json")

    async def delete_response(response_id: str) -> Response:
        store.delete(response_id)
        body = json.dumps({"id": response_id, "object": "response", "deleted": True}).encode()
        return Response(body, media_type="application/json")

    async def stored_response(request: Request, response_id: str) -> Response:
        if request.method == "GET":
            return await get_response(response_id)
        return await delete_response(response_id)

    path = "/v1/responses/{response_id}"
    app.add_api_route(path, stored_response, methods=["GET", "DELETE"], include_in_schema=False)
    for handler, method, summary in (
        (get_response, "GET", "A stored response, as it ended."),
        (delete_response, "DELETE", "Remove a stored response."),
    ):
        app.add_api_route(path, handler, methods=[method], summary=summary, responses={404: _NOT_STORED})
