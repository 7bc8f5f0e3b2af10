"""The wire protocols of the engine servers tokenrelay relays from: request bodies out, stream events in.

Sans-I/O, standard library only. ``request(protocol, prompt, params, model)`` gives the path and JSON body of
one streamed generation; a reader per protocol turns each SSE event's data into an :class:`UpstreamChunk`:

- ``openai``: vLLM's and tokenrelay's OpenAI servers with ``"return_token_ids": true``: ``choices[0].token_ids`` in every chunk are the new ids, ``prompt_token_ids`` arrive in
  the first chunk (top level for chat, in the choice for text completions), ``data: [DONE]`` ends.
- ``sglang``: SGLang's native ``POST /generate`` with ``"stream": true``: each event has ``output_ids`` and
  ``meta_info`` (``completion_tokens``, ``prompt_tokens``, ``finish_reason`` ``{"type": ...}``). The ids are
  cumulative (the whole reply so far) unless the server runs with ``--incremental-streaming-output``, when
  they are the new ones (queued deltas coalesced into one event); the reader tells which from the stream.
- ``tgi``: Text Generation Inference's ``POST /generate_stream``: one event per token, ``token.id``; the last
  event also has ``details.finish_reason`` (``length``, ``eos_token``, ``stop_sequence``).
- ``llamacpp``: llama.cpp's server. Its streamed ``tokens`` field drops the ids of tokens that end inside a
  UTF-8 character (a 3-token emoji arrives as one chunk with only its last id), so ids from it cannot be
  detokenized exactly: the reader relays its text deltas instead (``choices[0].delta.content`` / ``text``) and
  tokenrelay applies its own stop strings and framing to them. How many tokens each delta stands for comes
  from ``"timings_per_token": true`` (each chunk's ``timings.predicted_n`` is the count so far) and the final
  ``usage.completion_tokens``, which also counts the tokens that added no text (the bytes of a character a
  reply was cut inside, the end-of-sequence token); the first chunk's ``timings`` give the prompt's length
  (``prompt_n`` evaluated plus ``cache_n`` reused). Checked against llama-server built from llama.cpp as
  vendored by llama-cpp-python 0.3.36. Tool calls (issue 21): the request carries the OpenAI ``tools``,
  ``tool_choice`` and ``parallel_tool_calls`` (``request``'s ``tools``), llama-server renders them with its
  own chat template (``--jinja``), constrains the calls with its own grammar and streams them parsed, as
  ``delta.tool_calls``. The reader writes each call back as text in the generic format's markup
  (``<tool_call>``, a line ``{"name": NAME, "arguments": `` + the argument fragments as sent + ``}``, then
  ``</tool_call>``), so that the front's one tool path (``ToolCallExtractor``, its ``call_…`` ids, its
  chunks) relays them: the arguments joined are llama-server's own text, the name its name.

Every reader raises the :class:`TokenRelayError` an in-stream error stands for, and :class:`ProtocolError` for
a chunk that is not what the protocol says.

Over 400 lines because the four protocols' requests (response_format in each one's own field) and readers are
one concept, the wire each replica speaks, and splitting them would put a protocol's request apart from its
reader.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from tokenrelay._errors import ProtocolError
from tokenrelay._reasoning import ReasoningFormat
from tokenrelay.wire._chat_reader import choice_tool_calls, error_from_body

__all__ = [
    "LLAMACPP_MAX_ENUM_VALUES",
    "PROTOCOLS",
    "Protocol",
    "UpstreamChunk",
    "enum_values",
    "openai_response_format",
    "reader_for",
    "request",
    "stranded_policy",
]

Protocol: TypeAlias = Literal["openai", "sglang", "tgi", "llamacpp"]
PROTOCOLS: tuple[Protocol, ...] = ("openai", "sglang", "tgi", "llamacpp")

# Only what reaches the wire from tokenrelay's SamplingParams and Prompt: the same fields as engines.base,
# spelled as plain values so this module needs nothing but the standard library.
Messages: TypeAlias = "list[dict[str, Any]]"  # plain turns; OpenAI-shaped ones with tools (llamacpp)


@dataclass(slots=True)
class UpstreamChunk:
    """What one upstream event adds: new token ids (or, for a text protocol, new text), and the end.

    Not frozen: one is built per token, and a frozen dataclass's initialiser (``object.__setattr__`` per
    field) cost more than the rest of reading the chunk once the JSON was decoded."""

    token_ids: tuple[int, ...] = ()
    text: str = ""
    tokens: int = 0  # text protocols: how many tokens ``text`` stands for (may be > 0 with no text)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    done: bool = False  # the stream said it is complete (``[DONE]`` or a final event)
    # How the upstream's own text treats a character its reply is cut inside, as these ids show: "replace"
    # when their text ends with U+FFFD, else "discard"; None when the chunk has no ids or no text to tell.
    stranded: Literal["replace", "discard"] | None = None


def request(
    protocol: Protocol,
    prompt: str | Messages,
    *,
    model: str | None,
    max_tokens: int | None,
    temperature: float,
    top_p: float,
    seed: int | None,
    response_format: dict[str, Any] | None = None,
    tools: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The path and JSON body of one streamed generation. Stop strings are never sent: tokenrelay applies
    them itself, on its own text.

    ``response_format`` (OpenAI's shape: ``json_object``, or ``json_schema`` with its ``schema``) is sent in
    each protocol's own documented field (issue 20): ``response_format`` as is to vLLM and tokenrelay; to
    llama.cpp's server its ``json_schema`` field (read on both of its endpoints, converted to its grammar);
    SGLang's ``sampling_params.json_schema`` (the schema as a JSON string); TGI's ``parameters.grammar``
    (``{"type": "json", "value": schema}``). A JSON object with no schema is the schema ``{"type": "object"}``
    where a protocol has no such mode.

    ``tools`` (``tools``, ``tool_choice``, ``parallel_tool_calls``) go to llama.cpp's chat endpoint only: it
    renders and parses tools itself. The other protocols' replicas get the generic format's turns (``_tools``)
    and the front extracts the calls from their ids."""
    chat = not isinstance(prompt, str)
    schema = _schema_of(response_format)
    if protocol in ("openai", "llamacpp"):
        body: dict[str, Any] = {"stream": True, "temperature": temperature, "top_p": top_p}
        if model:
            body["model"] = model
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if seed is not None:
            body["seed"] = seed
        body["stream_options"] = {"include_usage": True}
        if protocol == "openai":
            body["return_token_ids"] = True
            if response_format is not None:
                body["response_format"] = response_format
        else:  # llama.cpp's server: token counts in every chunk (see LlamaCppTextReader)
            body["timings_per_token"] = True
            if schema is not None:
                body["json_schema"] = schema
        if chat:
            body["messages"] = prompt
            if tools and protocol == "llamacpp":
                body.update(tools)
            return "/v1/chat/completions", body
        body["prompt"] = prompt
        return "/v1/completions", body
    if chat:  # /generate and /generate_stream take text: a chat template would have to be applied here
        raise ValueError(f"the {protocol} protocol takes text prompts only")
    if protocol == "sglang":
        sampling: dict[str, Any] = {"temperature": temperature, "top_p": top_p}
        if max_tokens is not None:
            sampling["max_new_tokens"] = max_tokens
        if seed is not None:
            sampling["sampling_seed"] = seed
        if schema is not None:
            sampling["json_schema"] = json.dumps(schema, ensure_ascii=False)
        return "/generate", {"text": prompt, "sampling_params": sampling, "stream": True}
    # TGI: temperature must be > 0 and top_p < 1 when sent; greedy is do_sample=false.
    parameters: dict[str, Any] = {"details": True, "do_sample": temperature > 0}
    if temperature > 0:
        parameters["temperature"] = temperature
    if top_p < 1.0:
        parameters["top_p"] = top_p
    if max_tokens is not None:
        parameters["max_new_tokens"] = max_tokens
    if seed is not None:
        parameters["seed"] = seed
    if schema is not None:
        parameters["grammar"] = {"type": "json", "value": schema}
    return "/generate_stream", {"inputs": prompt, "parameters": parameters}


# llama.cpp's server turns a schema into a GBNF grammar whose sampler checks every token against every
# alternative: a 20,000-value enum took it 477 s to answer on this project's VM. Past this many enum values
# in one schema the front refuses the request rather than hand a replica minutes of work (OpenAI's own limit).
LLAMACPP_MAX_ENUM_VALUES = 1000


def openai_response_format(
    schema: str | None, name: str | None, description: str | None, strict: bool | None
) -> dict[str, Any]:
    """OpenAI's ``response_format`` for a schema (JSON text), or for any JSON object when ``schema`` is None."""
    if schema is None:
        return {"type": "json_object"}
    spec: dict[str, Any] = {"name": name or "response", "schema": json.loads(schema)}
    if description is not None:
        spec["description"] = description
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


def enum_values(schema: str) -> int:
    """How many ``enum`` values a schema (JSON text) lists in all."""
    values, todo = 0, [json.loads(schema)]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            enum = node.get("enum")
            values += len(enum) if isinstance(enum, list) else 0
            todo.extend(v for k, v in node.items() if k not in ("enum", "const"))
        elif isinstance(node, list):
            todo.extend(node)
    return values


def _schema_of(response_format: dict[str, Any] | None) -> object:
    """The JSON Schema ``response_format`` asks for (``None``: plain text)."""
    if response_format is None or response_format.get("type") == "text":
        return None
    if response_format.get("type") == "json_object":
        return {"type": "object"}
    return response_format["json_schema"]["schema"]


#: Decodes one event's JSON; it raises ValueError on bad JSON. ``json.loads`` by default; the engine passes a
#: faster decoder when one is installed (``reader_for``'s ``loads``).
Loads: TypeAlias = Callable[[str], Any]


def _object(data: str, loads: Loads) -> dict[str, Any]:
    try:
        obj = loads(data)
    except ValueError as exc:
        raise ProtocolError(f"upstream chunk is not JSON: {data[:200]!r}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError(f"upstream chunk is not a JSON object: {data[:200]!r}")
    if obj.get("error") is not None:
        raise error_from_body(200, data.encode())
    return obj


def _ids(value: object, where: str) -> tuple[int, ...]:
    if type(value) is list:
        for i in value:  # a loop: ``all()`` over a generator costs a frame per chunk
            if type(i) is not int:
                break
        else:
            return tuple(value)
    raise ProtocolError(f"upstream {where} is not a list of token ids: {value!r:.200}")


class OpenAITokenReader:
    """``return_token_ids`` streams: vLLM, tokenrelay."""

    text_protocol = False

    def __init__(self, loads: Loads = json.loads) -> None:
        self._loads = loads

    def feed(self, data: str) -> UpstreamChunk:
        if data == "[DONE]":
            return UpstreamChunk(done=True)
        obj = _object(data, self._loads)
        choices = obj.get("choices")
        if not choices:  # the include_usage chunk
            usage = obj.get("usage")
            prompt_tokens = usage.get("prompt_tokens") if type(usage) is dict else None
            return UpstreamChunk(prompt_tokens=prompt_tokens if type(prompt_tokens) is int else None)
        choice = choices[0] if type(choices) is list else None
        if type(choice) is not dict:
            raise ProtocolError(f"upstream choices are not a list of objects: {choices!r:.200}")
        prompt_ids = choice.get("prompt_token_ids")
        if prompt_ids is None:
            prompt_ids = obj.get("prompt_token_ids")
        token_ids = choice.get("token_ids")
        delta = choice.get("delta")
        added = delta.get("content") if type(delta) is dict else choice.get("text")
        if token_ids is None:
            # A chunk with no ids is fine only when it adds nothing (a role chunk, an empty finish chunk).
            if added:
                raise ProtocolError(
                    "upstream sent text without token_ids: it does not honour return_token_ids "
                    "(use --upstream-protocol llamacpp for a server that cannot send ids)"
                )
            token_ids = []
        finish = choice.get("finish_reason")
        ids = _ids(token_ids, "token_ids")
        return UpstreamChunk(
            ids,
            "",
            0,
            finish if type(finish) is str else None,
            len(prompt_ids) if type(prompt_ids) is list else None,
            False,
            stranded_policy(ids, added),
        )


def stranded_policy(ids: tuple[int, ...], text: object) -> Literal["replace", "discard"] | None:
    """What a chunk's text says of the upstream's stranded bytes (see ``UpstreamChunk.stranded``).

    A reply cut inside a character ends, on a server that replaces the stranded bytes (tokenrelay), with a
    chunk whose text ends with U+FFFD and which carries the ids of that character; on one that drops them
    (vLLM), the ids of the unfinished character arrive with no text. So the last chunk with ids tells: a
    literal U+FFFD the model wrote, followed by a cut character, still ends in a chunk of ids without text.
    """
    if not ids:
        return None
    return "replace" if type(text) is str and text[-1:] == "\ufffd" else "discard"


class SGLangReader:
    """SGLang's native ``/generate`` stream, cumulative or incremental ``output_ids``.

    Which one a server sends is its start-up flag, not the request's, so it is read from the stream: an
    incremental event's ``meta_info.completion_tokens`` counts the ids seen before it plus its own. The count
    is never compared with a cumulative list's length: that list is the server's live one, which may already
    hold ids its count does not (SGLang serializes it after the count was taken). Otherwise (no count, or one
    that disagrees, as when a final delta leaves out a trimmed stop id), a list that starts with every id seen
    so far is cumulative. A finish of type ``abort`` is the server's error.
    """

    text_protocol = False

    def __init__(self, loads: Loads = json.loads) -> None:
        self._loads = loads
        self._ids: list[int] = []  # the reply's ids passed on so far

    def feed(self, data: str) -> UpstreamChunk:
        if data == "[DONE]":
            return UpstreamChunk(done=True)
        obj = _object(data, self._loads)
        ids = _ids(obj.get("output_ids"), "output_ids")
        raw_meta = obj.get("meta_info")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        seen = len(self._ids)
        total = meta.get("completion_tokens")
        # While nothing was seen the two agree; a count of the ids seen plus these is incremental (a cumulative
        # list is at least as long as its count); else a list that repeats the reply so far is cumulative.
        incremental = not seen or total == seen + len(ids) or list(ids[:seen]) != self._ids
        new = ids if incremental else ids[seen:]
        self._ids.extend(new)
        finish = meta.get("finish_reason")
        reason = None
        if isinstance(finish, dict):
            kind = finish.get("type")
            if kind == "abort":
                status = finish.get("status_code")
                body = {
                    "error": {
                        "message": str(finish.get("message") or "aborted by the server"),
                        "type": str(finish.get("err_type") or ""),
                    }
                }
                raise error_from_body(status if type(status) is int else 500, json.dumps(body).encode())
            reason = "length" if kind == "length" else "stop" if isinstance(kind, str) else None
        prompt_tokens = meta.get("prompt_tokens")
        return UpstreamChunk(
            token_ids=new,
            finish_reason=reason,
            prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else None,
        )


class TGIReader:
    """Text Generation Inference's ``/generate_stream``: one ``token`` per event."""

    text_protocol = False

    def __init__(self, loads: Loads = json.loads) -> None:
        self._loads = loads

    def feed(self, data: str) -> UpstreamChunk:
        if data == "[DONE]":
            return UpstreamChunk(done=True)
        obj = _object(data, self._loads)
        token = obj.get("token")
        if not isinstance(token, dict) or type(token.get("id")) is not int:
            raise ProtocolError(f"upstream TGI event has no token id: {data[:200]!r}")
        details = obj.get("details")
        reason = None
        prompt_tokens = None
        if isinstance(details, dict):
            raw = details.get("finish_reason")
            reason = "length" if raw == "length" else "stop" if isinstance(raw, str) else None
            length = details.get("input_length")
            prompt_tokens = length if isinstance(length, int) else None
        return UpstreamChunk(
            token_ids=(token["id"],),
            finish_reason=reason,
            prompt_tokens=prompt_tokens,
            done=reason is not None,
        )


class LlamaCppTextReader:
    """llama.cpp's server: its text deltas, each with the number of tokens it stands for (see the module
    docstring). Tokens that added no text are reported on a chunk of their own (``text == ""``), except that
    when the server ended the reply itself (``finish_reason`` ``"stop"``) they are held under ``max_tokens``:
    the end-of-sequence token on the last allowed step must not look like a reply cut short."""

    text_protocol = True

    def __init__(self, max_tokens: int | None = None, loads: Loads = json.loads) -> None:
        self._loads = loads
        self._max_tokens = max_tokens
        self._counted = 0  # tokens passed on so far
        self._prompt_told = False
        self._finish: str | None = None
        self._call = -1  # the index of the tool call being written back as markup (-1: none open)
        self._calls = 0  # tool calls written back so far
        self._call_arguments = False  # the open call has had argument text
        self._thinking = 0  # reasoning written back as markup: 0 none yet, 1 open, 2 closed

    def _reasoning_text(self, delta: object, text: str, more: bool) -> tuple[str, bool]:
        """``text`` with the delta's separate reasoning (``reasoning_content``, or ``reasoning``) written back
        between ``<think>`` and ``</think>`` (:data:`RELAYED_REASONING`), so the front's one reasoning splitter
        cuts it again; ``more``: the delta carries answer text or calls, which close the reasoning. Also whether
        the delta carried reasoning (generated text, a token)."""
        thought = None
        if isinstance(delta, dict):
            thought = delta.get("reasoning_content")
            if not isinstance(thought, str):
                thought = delta.get("reasoning")
        out = ""
        thinking = isinstance(thought, str) and bool(thought) and self._thinking < 2
        if thinking:
            out = ("<think>" if self._thinking == 0 else "") + str(thought)
            self._thinking = 1
        if more and self._thinking == 1:
            out += "</think>"
            self._thinking = 2
        return out + text, thinking

    def _tool_text(self, chunk: dict[str, Any], finish: bool) -> str:
        """The markup of ``chunk``'s ``delta.tool_calls`` (see the module docstring); ``finish``: close the
        open call."""
        out: list[str] = []
        for delta in choice_tool_calls(chunk):
            if delta.index != self._call:
                out.append(self._close_call())
                if delta.name is None:
                    raise ProtocolError(f"tool call {delta.index}'s first delta has no function name")
                name = json.dumps(delta.name, ensure_ascii=False)
                between = "\n" if self._calls else ""
                out.append(f'{between}<tool_call>\n{{"name": {name}, "arguments": ')
                self._call, self._calls = delta.index, self._calls + 1
            if delta.arguments:
                out.append(delta.arguments)
                self._call_arguments = True
        if finish:
            out.append(self._close_call())
        return "".join(out)

    def _close_call(self) -> str:
        if self._call < 0:
            return ""
        end = "}\n</tool_call>" if self._call_arguments else "{}}\n</tool_call>"  # no arguments: {}
        self._call, self._call_arguments = -1, False
        return end

    def feed(self, data: str) -> UpstreamChunk:
        if data == "[DONE]":
            return UpstreamChunk(done=True)
        obj = _object(data, self._loads)
        timings = obj.get("timings")
        timings = timings if isinstance(timings, dict) else {}
        usage = obj.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        prompt_tokens = usage.get("prompt_tokens")
        if not isinstance(prompt_tokens, int) and not self._prompt_told:
            evaluated, cached = timings.get("prompt_n"), timings.get("cache_n")
            if type(evaluated) is int and type(cached) is int:
                prompt_tokens = evaluated + cached
        if isinstance(prompt_tokens, int):
            self._prompt_told = True
        else:
            prompt_tokens = None
        total = usage.get("completion_tokens", timings.get("predicted_n"))
        choices = obj.get("choices") or []
        text = ""
        generated = False  # the chunk carries generated text (a server without counts: one token)
        if choices:
            choice = choices[0]
            if not isinstance(choice, dict):
                raise ProtocolError(f"upstream choice is not an object: {choice!r:.200}")
            delta = choice.get("delta")
            added = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            text = added if isinstance(added, str) else ""
            finish = choice.get("finish_reason")
            if isinstance(finish, str):
                self._finish = finish
            calls = isinstance(delta, dict) and bool(delta.get("tool_calls"))
            answered = bool(text) or calls  # (markup written back below is no generated text of its own)
            if isinstance(delta, dict) and (calls or self._call >= 0):
                if text and self._call >= 0:  # text after a call: the call is over
                    text = self._close_call() + text
                text += self._tool_text(obj, isinstance(finish, str))
            text, thought = self._reasoning_text(delta, text, answered)
            generated = answered or thought
        # A server that sends no counts: one token per delta.
        tokens = max(0, total - self._counted) if type(total) is int else 1 if generated else 0
        if not text and self._finish in ("stop", "tool_calls") and self._max_tokens is not None:
            tokens = max(0, min(tokens, self._max_tokens - 1 - self._counted))
        self._counted += tokens
        return UpstreamChunk(
            text=text,
            tokens=tokens,
            finish_reason=self._finish if choices else None,
            prompt_tokens=prompt_tokens,
        )


#: How the front reads reasoning a text replica sent apart (``LlamaCppTextReader`` writes it back as this
#: markup): at the reply's start only, and no whitespace taken as markup, so the relayed text is exact.
RELAYED_REASONING = ReasoningFormat("relayed", "<think>", "</think>", start="tag", markup_whitespace=False)

Reader: TypeAlias = OpenAITokenReader | SGLangReader | TGIReader | LlamaCppTextReader


def reader_for(protocol: Protocol, *, max_tokens: int | None = None, loads: Loads = json.loads) -> Reader:
    """A fresh reader for one stream (``max_tokens`` as requested: the text protocol's counts need it;
    ``loads`` decodes each event's JSON)."""
    if protocol == "openai":
        return OpenAITokenReader(loads)
    if protocol == "sglang":
        return SGLangReader(loads)
    if protocol == "tgi":
        return TGIReader(loads)
    return LlamaCppTextReader(max_tokens, loads)
