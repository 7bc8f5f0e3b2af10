"""``response_format`` (issue 20): the request field, and the checks that turn it into a ``JSONConstraint``.

Accepted on both generation endpoints (``/v1/completions`` has no such field in OpenAI's API; vLLM and
llama-server take it there too, and so does tokenrelay):

- ``{"type": "text"}`` or no field: no constraint;
- ``{"type": "json_object"}``: the reply is one JSON object;
- ``{"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}``: the reply is one
  JSON value valid against ``schema``. ``name`` is required (as OpenAI and vLLM require it): 1 to 64 letters,
  digits, ``_`` or ``-``. The schema is always enforced, ``strict`` or not; ``strict`` is passed on to
  upstream servers as given.

A schema is checked in three steps, cheapest first, each a 400 naming the place: its bounds
(``_schema_subset.check_bounds``: size, nesting), that it is a JSON Schema at all (its dialect's
meta-schema, with ``jsonschema_rs``), then the subset (keywords, references, a base case). Then the engine may
refuse what it cannot compile (``check_constraint``, at intake).

Why ``jsonschema_rs`` and not ``jsonschema``'s ``check_schema``: on a 520 KB schema of 4,000 small objects
``check_schema`` took 24 s on this project's VM (under load), ``jsonschema_rs.meta.validate`` 70 ms; a
request must be refused within a second. The meta-schemas it knows are bundled; a ``$schema`` outside the
known drafts is refused here, before it is called, since it would try to fetch that URL.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tokenrelay._errors import InvalidRequestError
from tokenrelay._schema_subset import SchemaLimits, check_bounds, check_subset
from tokenrelay.engines.base import JSONConstraint

__all__ = ["DIALECTS", "JSONSchemaFormat", "ResponseFormat", "constraint_from"]

_STRICT = ConfigDict(extra="allow", strict=True, allow_inf_nan=False, populate_by_name=True)
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

DIALECTS = frozenset(
    f"{scheme}://json-schema.org/{draft}"
    for scheme in ("http", "https")
    for draft in (
        "draft/2020-12/schema",
        "draft/2019-09/schema",
        "draft-07/schema",
        "draft-06/schema",
        "draft-04/schema",
    )
)
"""The ``$schema`` values accepted (with or without a trailing ``#``); none means draft 2020-12."""


class JSONSchemaFormat(BaseModel):
    model_config = _STRICT
    name: str
    description: str | None = None
    # "schema" would shadow BaseModel.schema (a warning, so a failure under pytest): the alias is the wire name.
    schema_: dict[str, Any] | bool | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = _STRICT
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


def constraint_from(
    response_format: ResponseFormat | None, *, limits: SchemaLimits | None = None
) -> JSONConstraint | None:
    """The constraint ``response_format`` asks for (``None`` for text), or ``InvalidRequestError``."""
    if response_format is None:
        return None
    if response_format.type != "json_schema" and response_format.json_schema is not None:
        raise InvalidRequestError(
            f"response_format.json_schema is only for type 'json_schema', not {response_format.type!r}",
            param="response_format.json_schema",
        )
    if response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return JSONConstraint()
    spec = response_format.json_schema
    if spec is None:
        raise InvalidRequestError(
            "response_format.json_schema is required when response_format.type is 'json_schema'",
            param="response_format.json_schema",
        )
    if not _NAME.fullmatch(spec.name):
        raise InvalidRequestError(
            "response_format.json_schema.name must be 1 to 64 letters, digits, '_' or '-'",
            param="response_format.json_schema.name",
        )
    param = "response_format.json_schema.schema"
    schema = spec.schema_
    if schema is None:
        raise InvalidRequestError(f"{param} is required: the JSON Schema the reply must match", param=param)
    # Compact, key order kept (properties are generated in the order they are declared), non-ASCII as is.
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    size = len(text.encode("utf-8"))
    check_bounds(schema, size, param=param, limits=limits)
    _check_dialect(schema, param)
    check_subset(schema, param=param, limits=limits)
    return JSONConstraint(schema=text, name=spec.name, description=spec.description, strict=spec.strict)


def _check_dialect(schema: dict[str, Any] | bool, param: str) -> None:
    """Refuse a schema that is not a JSON Schema of a known draft (``"type": "strnig"``, ``"required": "a"``)."""
    import jsonschema_rs

    if isinstance(schema, dict) and "$schema" in schema:
        dialect = schema["$schema"]
        if not isinstance(dialect, str) or dialect.rstrip("#") not in DIALECTS:
            raise InvalidRequestError(
                f"{param}.$schema: {dialect!r:.100} is not a JSON Schema draft this server knows "
                "(2020-12, 2019-09, draft-07, -06 or -04)",
                param=f"{param}.$schema",
            )
    try:
        jsonschema_rs.meta.validate(schema)
    except jsonschema_rs.ValidationError as exc:
        path = [str(step) for step in exc.instance_path]
        where = ".".join((param, *path))
        detail = exc.message
        if path and path[-1] == "type":
            detail = f"{detail}: a type is one of object, array, string, number, integer, boolean, null"
        raise InvalidRequestError(f"{where}: not a valid JSON Schema: {detail}", param=where) from exc
    except jsonschema_rs.ReferencingError as exc:  # not expected once the dialect is known; never a 500
        raise InvalidRequestError(f"{param}: not a valid JSON Schema: {exc}", param=param) from exc
