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
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tokenrelay._errors import InvalidRequestError
from tokenrelay._schema_subset import UNENFORCEABLE, SchemaLimits, check_bounds, check_subset
from tokenrelay.engines.base import JSONConstraint

__all__ = [
    "DIALECTS",
    "JSON_TYPES",
    "JSONSchemaFormat",
    "ResponseFormat",
    "check_dialect",
    "constraint_from",
    "openapi_schemas",
]

JSON_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")

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
    check_dialect(schema, param)
    check_subset(schema, param=param, limits=limits)
    return JSONConstraint(schema=text, name=spec.name, description=spec.description, strict=spec.strict)


def check_dialect(schema: dict[str, Any] | bool, param: str) -> None:
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


def openapi_schemas(ref: Callable[[str], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The OpenAPI schemas of ``response_format`` (``server/openapi.py`` adds them to the document; ``ref``
    makes a reference to one of them by name)."""
    # JSONSchema describes the supported subset's main keywords (a valid body is served). The keywords no
    # engine here can enforce (UNENFORCEABLE, refused with a 400) are named in its description rather than
    # written as `false` schemas: schemathesis cannot negate a `not` below the document root.
    count = {"type": "integer", "minimum": 0}
    subschema = {"anyOf": [{"type": "boolean"}, ref("JSONSchema")]}
    return {
        "ResponseFormat": {
            "description": (
                "`text` (no constraint), `json_object` (the reply is one JSON object) or `json_schema` (the "
                "reply is one JSON value valid against `json_schema.schema`; always enforced, `strict` or "
                "not). The replay engine does not constrain: it replays its text."
            ),
            "anyOf": [
                {
                    "type": "object",
                    "required": ["type"],
                    "properties": {
                        "type": {"enum": ["text", "json_object"]},
                        "json_schema": {"type": "null"},
                    },
                },
                {
                    "type": "object",
                    "required": ["type", "json_schema"],
                    "properties": {"type": {"const": "json_schema"}, "json_schema": ref("JSONSchemaFormat")},
                },
            ],
        },
        "JSONSchemaFormat": {
            "type": "object",
            "required": ["name", "schema"],
            "properties": {
                "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                "description": {"type": ["string", "null"]},
                "schema": ref("JSONSchema"),
                "strict": {"type": ["boolean", "null"]},
            },
        },
        "JSONSchema": {
            "type": "object",
            "description": (
                "A JSON Schema in the subset this server enforces (README: Structured output); refused: "
                + ", ".join(f"`{keyword}`" for keyword in sorted(UNENFORCEABLE))
            ),
            "properties": {
                "type": {
                    "anyOf": [
                        {"enum": list(JSON_TYPES)},
                        {
                            "type": "array",
                            "items": {"enum": list(JSON_TYPES)},
                            "minItems": 1,
                            "uniqueItems": True,
                        },
                    ]
                },
                "properties": {"type": "object", "additionalProperties": subschema},
                "required": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                "additionalProperties": subschema,
                "items": subschema,
                "anyOf": {"type": "array", "minItems": 1, "items": subschema},
                "minItems": count,
                "maxItems": count,
                "minLength": count,
                "maxLength": count,
                "description": {"type": "string"},
                "title": {"type": "string"},
            },
        },
    }
