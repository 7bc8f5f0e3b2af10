"""A replica that fails on purpose, in a process of its own: ``python tests/faulty_replica.py MODE PORT IDS``.

It speaks just enough HTTP/1.1 (``GET /health``, ``GET /v1/models``, a streamed ``POST`` answered with chunked
SSE in tokenrelay's chunk shape with ``token_ids``) and, after ``GOOD`` good token frames, does what ``MODE``
says:

- ``stall``: sends nothing more, the connection left open;
- ``reset``: resets the connection (an RST: ``SO_LINGER`` 0);
- ``oversized``: one event line that never ends (bytes until the peer gives up);
- ``nonjson``: a frame whose data is not JSON;
- ``html``: answers the POST at once with ``200 text/html`` and an HTML page instead of an event stream;
- ``drop-second``: answers a POST whole (every frame, a finish, ``[DONE]``) and keeps the connection, then
  closes it without a byte when a second POST comes on it, as a server whose keep-alive timer fired just then.

The frames carry ``IDS`` (a JSON list of ``[id, text]``: SmolLM2's ids of ``TEXT`` and each one's text, which
the test writes) one by one, so a client knows exactly what it should have seen.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import sys

GOOD = 3
TEXT = "Hello there, relay!"


def frame(payload: object) -> bytes:
    data = b"data: " + json.dumps(payload).encode() + b"\n\n"
    return b"%x\r\n" % len(data) + data + b"\r\n"


def token_frames(ids: list[tuple[int, str]]) -> list[bytes]:
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}], "prompt_token_ids": [1]}
    out = [frame(role)]
    for i, text in ids:
        out.append(frame({"choices": [{"index": 0, "delta": {"content": text}, "token_ids": [i]}]}))
    return out


async def serve(mode: str, port: int, ids: list[tuple[int, str]]) -> None:
    frames = token_frames(ids)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        posts = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if length:
                    await reader.readexactly(length)
                if head.startswith(b"GET "):
                    body = b'{"status":"ok"}' if b"/health" in head else b'{"data":[{"id":"faulty"}]}'
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                        % len(body)
                        + body
                    )
                    await writer.drain()
                    continue
                if mode == "drop-second":
                    posts += 1
                    if posts == 2:
                        return  # (the finally closes it)
                    await whole(writer)
                    continue
                await answer(writer)
                return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            if mode != "stall":
                writer.close()

    async def whole(writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        for data in frames:
            writer.write(data)
        writer.write(
            frame({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "token_ids": []}]})
        )
        writer.write(b"%x\r\n" % len(b"data: [DONE]\n\n") + b"data: [DONE]\n\n\r\n0\r\n\r\n")
        await writer.drain()

    async def answer(writer: asyncio.StreamWriter) -> None:
        if mode == "html":
            page = b"<!doctype html><html><body><h1>502 Bad Gateway</h1></body></html>"
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: %d\r\n\r\n" % len(page) + page
            )
            await writer.drain()
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        for data in frames[: GOOD + 1]:  # the role frame, then GOOD token frames
            writer.write(data)
            await writer.drain()
            await asyncio.sleep(0.05)
        if mode == "stall":
            await asyncio.sleep(3600)
        elif mode == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        elif mode == "oversized":
            line = b"data: " + b"x" * 65536
            writer.write(b"%x\r\n" % len(line) + line + b"\r\n")
            while True:  # never a line end: only the client's size limit ends this
                piece = b"y" * 65536
                writer.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
                await writer.drain()
        elif mode == "nonjson":
            writer.write(b"%x\r\n" % len(b"data: <not json>\n\n") + b"data: <not json>\n\n\r\n")
            await writer.drain()
            await asyncio.sleep(3600)

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with open(sys.argv[3], encoding="utf-8") as f:
        asyncio.run(serve(sys.argv[1], int(sys.argv[2]), json.load(f)))
