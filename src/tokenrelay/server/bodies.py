"""A JSON request body, validated against a pydantic model: what every dialect's request parser shares.

Every way a body can be wrong ends in one ``InvalidRequestError`` whose ``param`` names the field, so the
server answers with a 400 in its dialect's shape and keeps serving: invalid UTF-8, malformed JSON (``NaN``
and ``Infinity`` are not JSON, and nesting deep enough to exhaust the parser is refused, issue 12), a body that
is not an object, missing or mistyped fields, values out of range, text holding a lone surrogate
(``"\\ud800"`` is valid JSON but not Unicode text). Types are strict (``STRICT``), as OpenAI's and Anthropic's
are: ``"5"`` or ``true`` where a number is expected is a 400 naming the field, not coerced (an integer is
accepted where a number is expected, and a number with no fraction where an integer is: ``Integer``).

``requests.py`` (Chat Completions and text completions) and each other dialect's parser validate with
:func:`validate` and check text with :func:`check_text`.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from tokenrelay._errors import InvalidRequestError

__all__ = ["STRICT", "Integer", "check_text", "is_off", "validate"]

M = TypeVar("M", bound=BaseModel)

# strict: no coercion from strings or booleans; allow_inf_nan: a non-finite number is refused by name.
STRICT = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


def _integral(value: object) -> object:
    # JSON has one number type: 5.0 is the integer 5 (JSON Schema agrees); 5.5, "5" and true are not.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Integer = Annotated[int, BeforeValidator(_integral)]


def _loads(body: bytes) -> dict[str, Any]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(f"the request body is not valid UTF-8 (byte {exc.start})") from exc
    non_finite: list[str] = []

    def constant(name: str) -> float:  # NaN, Infinity, -Infinity: Python's json takes them, JSON does not
        non_finite.append(name)
        return math.nan

    try:
        data = json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from exc
    except (
        ValueError
    ) as exc:  # Python's limit on integer digits (4,300), not a JSON rule: no such number is sane
        raise InvalidRequestError("the request body holds an integer with too many digits") from exc
    except RecursionError as exc:  # ~1,000 nested arrays or objects (a 2 KB body) exhaust the parser
        raise InvalidRequestError("the request body is not valid JSON: nested too deeply") from exc
    if not isinstance(data, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    if non_finite:
        param = _path_of_non_finite(data)
        where = f" (in {param})" if param else ""
        raise InvalidRequestError(
            f"the request body is not valid JSON: {non_finite[0]} is not a JSON number{where}", param=param
        )
    return data


def _path_of_non_finite(data: dict[str, Any]) -> str | None:
    """The dotted path of the first non-finite number in ``data`` (iterative: the data may nest deeply)."""
    todo: list[tuple[str, object]] = [(str(k), v) for k, v in data.items()]
    while todo:
        path, value = todo.pop(0)
        if isinstance(value, float) and not math.isfinite(value):
            return path
        if isinstance(value, dict):
            todo.extend((f"{path}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            todo.extend((f"{path}.{i}", v) for i, v in enumerate(value))
    return None


def check_text(value: str, param: str) -> None:
    """Refuse a string that is not Unicode text: a lone surrogate cannot be tokenized, written or logged."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequestError(
            f"{param} holds a lone surrogate (U+{ord(value[exc.start]):04X} at index {exc.start}); "
            "text must be valid Unicode",
            param=param,
        ) from exc


def _step_into(node: object, step: int | str) -> tuple[bool, object]:
    if isinstance(node, dict) and step in node:
        return True, node[step]
    if isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
        return True, node[step]
    return False, node


def _from_validation(exc: ValidationError, data: dict[str, Any]) -> InvalidRequestError:
    err = exc.errors()[0]
    # pydantic's location also names the union member it tried ("stop.str", "content.list[TextPart].0"):
    # keep only the steps that are keys and indices of the request itself, and the name of a missing field.
    loc = err["loc"]
    path: list[str] = []
    node: object = data
    for i, step in enumerate(loc):
        found, node = _step_into(node, step)
        if found or (err["type"] == "missing" and i == len(loc) - 1):
            path.append(str(step))
    param = ".".join(path) or None
    message = f"{param}: {err['msg']}" if param else err["msg"]
    return InvalidRequestError(message, param=param)


def is_off(value: object, off: tuple[object, ...]) -> bool:
    # As JSON compares: true is not 1, false is not 0 (Python's == says they are).
    return any(value == o and isinstance(value, bool) == isinstance(o, bool) for o in off)


def validate(body: bytes, model: type[M]) -> M:
    """The body as ``model`` (its undeclared fields in ``model_extra``), refused as the long way refuses."""
    # One pass from bytes to the model (pydantic's JSON parser), not json.loads and then a walk of the dicts:
    # this is on every request's path. A body it refuses, or one that may hold a non-finite number (which it
    # would take in an ignored field), goes the long way, whose errors name the field. Its parser refuses
    # what json.loads lets through only to be refused later (a lone surrogate's escape, an integer of
    # thousands of digits), so both ways accept the same bodies (tests/test_server_requests.py).
    if b"NaN" not in body and b"Infinity" not in body:
        try:
            req = model.model_validate_json(body)
        except (ValueError, RecursionError):  # ValidationError is a ValueError
            pass
        else:
            return req
    return _validate_loaded(body, model)


def _validate_loaded(body: bytes, model: type[M]) -> M:
    """The long way: ``json.loads``, then the model; every refusal names what is wrong."""
    data = _loads(body)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _from_validation(exc, data) from exc
    except RecursionError as exc:  # deep nesting in a field the validator walks
        raise InvalidRequestError("the request body is nested too deeply") from exc
