"""_schema_subset: which JSON Schemas tokenrelay enforces, checked before an engine sees them (issue 20)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenrelay._errors import InvalidRequestError
from tokenrelay._schema_subset import UNENFORCEABLE, SchemaLimits, check_bounds, check_subset

P = "response_format.json_schema.schema"


def check(schema: object, limits: SchemaLimits | None = None) -> None:
    check_bounds(schema, len(json.dumps(schema).encode()), param=P, limits=limits)
    check_subset(schema, param=P, limits=limits)


def refusal(schema: object, limits: SchemaLimits | None = None) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        check(schema, limits)
    assert info.value.status_code == 400 and info.value.param is not None
    assert info.value.param.startswith(P)
    return info.value


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}

ACCEPTED: dict[str, object] = {
    "an object": PERSON,
    "any value": {},
    "true": True,
    "an enum": {"enum": ["red", "green", 3, None]},
    "a const": {"const": {"a": [1, 2]}},
    "a linked list (next is optional)": {
        "type": "object",
        "properties": {"value": {"type": "integer"}, "next": {"$ref": "#"}},
        "required": ["value"],
    },
    "a tree (children may be empty)": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "required": ["children"],
            }
        },
        "$ref": "#/$defs/node",
    },
    "recursion with a base case in anyOf": {
        "anyOf": [{"type": "null"}, {"type": "object", "properties": {"n": {"$ref": "#"}}, "required": ["n"]}]
    },
    "recursion that may be a string": {
        "type": ["object", "string"],
        "properties": {"a": {"$ref": "#"}},
        "required": ["a"],
    },
    "a pointer with escapes": {"$defs": {"a/b~c": {"type": "string"}}, "$ref": "#/$defs/a~1b~0c"},
    "a percent-encoded pointer": {"$defs": {"a b": {"type": "string"}}, "$ref": "#/$defs/a%20b"},
    "draft-07 definitions": {"definitions": {"x": {"type": "integer"}}, "$ref": "#/definitions/x"},
    "unknown keywords are ignored": {"type": "string", "x-vendor": 1, "discriminator": {"propertyName": "k"}},
    "annotations": {"type": "string", "title": "t", "description": "d", "default": "x", "examples": ["x"]},
    "20,000-value enum": {"enum": [f"value-{i}" for i in range(20000)]},
}


@pytest.mark.parametrize("schema", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_the_supported_subset_is_accepted(schema: object) -> None:
    check(schema)


@pytest.mark.parametrize("keyword", sorted(UNENFORCEABLE))
def test_a_keyword_no_engine_can_enforce_is_refused_by_name_and_place(keyword: str) -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", keyword: {}}}}
    err = refusal(schema)
    assert err.param == f"{P}.properties.tags.{keyword}"
    assert f"'{keyword}'" in err.message and "cannot be enforced" in err.message


RECURSIVE: dict[str, tuple[object, str]] = {
    "a ref to itself": ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, f"{P}.$defs.a.$ref"),
    "two refs in a loop": (
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        f"{P}.$defs.a.$ref",
    ),
    "an object requiring itself": (
        {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]},
        f"{P}.properties.next.$ref",
    ),
    "an array that must hold itself": (
        {"type": "array", "items": {"$ref": "#"}, "minItems": 1},
        f"{P}.items.$ref",
    ),
    "a prefix item that is itself": (
        {"type": "array", "prefixItems": [{"$ref": "#"}], "minItems": 1},
        f"{P}.prefixItems.0.$ref",
    ),
    "every anyOf branch recurses": (
        {"anyOf": [{"$ref": "#/$defs/x"}, {"$ref": "#"}], "$defs": {"x": {"allOf": [{"$ref": "#"}]}}},
        f"{P}.anyOf.0.$ref",
    ),
}


@pytest.mark.parametrize(("schema", "param"), RECURSIVE.values(), ids=RECURSIVE.keys())
def test_a_recursive_ref_with_no_base_case_is_refused(schema: object, param: str) -> None:
    err = refusal(schema)
    assert err.param == param
    assert "no finite JSON value" in err.message and "with no way to end" in err.message


def test_unsatisfiable_schemas_with_refs_are_refused() -> None:
    assert "no JSON value" in refusal(False).message
    assert "no JSON value" in refusal({"$defs": {"n": {"enum": []}}, "$ref": "#/$defs/n"}).message
    assert (
        "no JSON value"
        in refusal(
            {
                "$defs": {"o": {"type": "object", "required": ["x"], "additionalProperties": False}},
                "$ref": "#/$defs/o",
            }
        ).message
    )


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("http://example.com/schema.json", "only references inside the schema"),
        ("other.json#/a", "only references inside the schema"),
        ("#anchor", "only references inside the schema"),
        ("#/$defs/missing", "does not resolve"),
        ("#/properties/a/type", "does not point at a schema"),
        ("#/required/5", "does not resolve"),
    ],
)
def test_refs_must_resolve_inside_the_document(ref: str, says: str) -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"$ref": ref}},
        "required": ["a"],
    }
    err = refusal(schema)
    assert err.param == f"{P}.properties.b.$ref" and says in err.message


def test_bounds_size_depth_and_subschemas() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(200):
        deep = {"type": "object", "properties": {"a": deep}}
    err = refusal(deep)
    assert err.param == P and "nests more than 64" in err.message
    ok: dict[str, Any] = {"type": "string"}
    for _ in range(31):  # 62 levels of JSON
        ok = {"type": "object", "properties": {"a": ok}}
    check(ok)
    big = {"enum": ["x" * 100] * 10_000}  # ~1 MB
    err = refusal(big)
    assert "bytes of JSON" in err.message and "524,288" in err.message
    many = {"anyOf": [{"type": "string"}] * 60}
    assert "more than 50 subschemas" in refusal(many, SchemaLimits(max_subschemas=50)).message


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    *("type", "properties", "required", "items", "anyOf", "allOf", "$ref", "$defs", "enum"),
                    *("minItems", "prefixItems", "additionalProperties", "not", "x"),
                ]
            )
            | st.text(max_size=3),
            inner,
            max_size=4,
        )
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_fuzz_any_json_is_checked_or_refused_never_another_exception(schema: object) -> None:
    # The server runs the meta-schema check first, but this module must not crash on any shape.
    with contextlib.suppress(InvalidRequestError):
        check(schema)


def productive_schemas() -> st.SearchStrategy[dict[str, Any]]:
    leaf: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
        [{"type": "string"}, {"type": "integer"}, {"enum": [1, 2]}, {"type": "null"}]
    )
    return st.recursive(
        leaf,
        lambda inner: (
            st.builds(
                lambda props, req: {"type": "object", "properties": props, "required": sorted(props)[:req]},
                st.dictionaries(st.text("abc", min_size=1, max_size=2), inner, max_size=3),
                st.integers(0, 3),
            )
            | st.builds(
                lambda item, n: {"type": "array", "items": item, "minItems": n}, inner, st.integers(0, 2)
            )
            | st.builds(lambda alts: {"anyOf": alts}, st.lists(inner, min_size=1, max_size=3))
        ),
        max_leaves=12,
    )


@settings(max_examples=200, deadline=None)
@given(productive_schemas())
def test_a_schema_with_a_finite_instance_is_never_refused_through_refs(schema: dict[str, Any]) -> None:
    # Moved behind a $ref (so the base-case check runs), a satisfiable schema without recursion still passes.
    check({"$defs": {"it": schema}, "$ref": "#/$defs/it"})
