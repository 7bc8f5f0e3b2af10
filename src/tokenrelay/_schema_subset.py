"""Which JSON Schemas tokenrelay can enforce: a request's schema checked before any engine sees it (issue 20).

``response_format: {"type": "json_schema", ...}`` promises a reply valid against the schema, so a schema the
engines cannot enforce is refused (a 400 naming the place), never served unconstrained. This module is the
engine-independent part of that check, on a schema already known to be a valid JSON Schema (the server runs
``jsonschema``'s ``check_schema`` first); each engine may refuse more when it compiles the schema (the
llama.cpp engine's llguidance refuses an overlapping ``oneOf`` or an unknown ``format``). Checked here:

- size: the schema's JSON text, its nesting and its number of subschemas are bounded (``SchemaLimits``), so
  what one request makes an engine compile is bounded too;
- keywords: the validation keywords no engine here enforces (``UNENFORCEABLE``: ``not``, ``if``/``then``/
  ``else``, ``uniqueItems``, ``contains``, ``propertyNames``, ``dependent*``, ``unevaluated*``, dynamic refs)
  are refused by name. Annotations (``title``, ``description``, ``default``, ``examples``, …) and keywords
  JSON Schema does not define are ignored, as the specification says;
- references: ``$ref`` must be a JSON pointer into the same document (``#``, ``#/$defs/name``) that resolves;
- a base case: a schema that no finite JSON value satisfies, such as a ``$ref`` that recurses with no way
  out (an object that requires a property of its own type), is refused. Grammar engines would otherwise
  accept it and then generate until ``max_tokens`` or emit nothing. The test is the classic "productive
  symbols" fixpoint over the schema read as an and-or graph, linear in the number of subschemas; it errs
  only towards accepting (constraints on strings and numbers are assumed satisfiable). It runs only when
  the schema has a ``$ref`` (without one nothing can recurse, and the engines refuse an unsatisfiable
  schema themselves: llguidance names ``false``, an empty ``enum``, ``minLength`` over ``maxLength``).

Standard library only; nothing here reads a clock or the network (a remote ``$ref`` is refused, not fetched).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from tokenrelay._errors import InvalidRequestError

__all__ = ["UNENFORCEABLE", "SchemaLimits", "check_bounds", "check_subset"]

UNENFORCEABLE = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "uniqueItems",
        "contains",
        "minContains",
        "maxContains",
        "propertyNames",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "unevaluatedItems",
        "unevaluatedProperties",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
    }
)
"""Validation keywords tokenrelay's engines cannot enforce while generating: a schema using one is refused."""

# Where subschemas sit: keyword → how its value holds them.
_ONE = frozenset(
    {"items", "additionalProperties", "additionalItems", "not", "if", "then", "else", "contains"}
    | {"propertyNames", "unevaluatedItems", "unevaluatedProperties"}
)
_LIST = frozenset({"prefixItems", "allOf", "anyOf", "oneOf", "items"})
_MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")


@dataclass(frozen=True)
class SchemaLimits:
    """Bounds on one request's schema. The depth counts nested JSON arrays and objects in the schema's text
    (llguidance's JSON reader stops at 128; an object property one level down is two)."""

    max_bytes: int = 512 * 1024
    max_depth: int = 64
    max_subschemas: int = 50_000


def check_bounds(schema: object, size: int, *, param: str, limits: SchemaLimits | None = None) -> None:
    """Raise ``InvalidRequestError`` naming ``param`` if ``schema`` (``size`` bytes of JSON text) is larger
    or nests deeper than ``limits``. Cheap: run it before anything else walks the schema."""
    limits = limits or SchemaLimits()
    if size > limits.max_bytes:
        raise InvalidRequestError(
            f"{param}: the schema is {size:,} bytes of JSON; this server compiles at most {limits.max_bytes:,}",
            param=param,
        )
    _check_depth(schema, param, limits.max_depth)


def check_subset(schema: object, *, param: str, limits: SchemaLimits | None = None) -> None:
    """Raise ``InvalidRequestError`` (``param`` plus the place, dotted) unless tokenrelay can enforce
    ``schema``, a valid JSON Schema within :func:`check_bounds`."""
    limits = limits or SchemaLimits()
    subschemas = _Subschemas(schema, limits.max_subschemas, param)
    refs = False
    for i, node in enumerate(subschemas.nodes):
        if isinstance(node, dict) and (UNENFORCEABLE.intersection(node) or "$ref" in node):
            _check_keywords(schema, node, subschemas.path(i), param)
            refs = True
    if refs or subschemas.nodes[0] is False:
        _check_base_case(schema, subschemas, param)


def _dotted(param: str, path: tuple[str, ...]) -> str:
    return ".".join((param, *path))


def _check_depth(schema: object, param: str, max_depth: int) -> None:
    todo: list[tuple[object, int]] = [(schema, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, dict):
            children: Iterable[object] = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > max_depth:
            raise InvalidRequestError(
                f"{param}: the schema nests more than {max_depth} arrays and objects deep; "
                "flatten it or move parts to $defs",
                param=param,
            )
        todo.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


class _Subschemas:
    """Every subschema (a dict or a bool), root first, each once; paths are rebuilt only for messages."""

    def __init__(self, schema: object, most: int, param: str) -> None:
        self.nodes: list[object] = []
        self._parents: list[tuple[int, tuple[str, ...]]] = []
        todo: deque[tuple[object, int, tuple[str, ...]]] = deque([(schema, -1, ())])
        while todo:
            node, parent, steps = todo.popleft()
            if len(self.nodes) >= most:
                raise InvalidRequestError(
                    f"{param}: the schema has more than {most:,} subschemas; this server compiles at most that",
                    param=param,
                )
            me = len(self.nodes)
            self.nodes.append(node)
            self._parents.append((parent, steps))
            if not isinstance(node, dict):
                continue
            for key, value in node.items():
                if key in _ONE and isinstance(value, dict | bool):
                    todo.append((value, me, (key,)))
                elif key in _LIST and isinstance(value, list):
                    todo.extend((v, me, (key, str(i))) for i, v in enumerate(value))
                elif key in _MAP and isinstance(value, dict):
                    todo.extend((v, me, (key, str(k))) for k, v in value.items())

    def path(self, index: int) -> tuple[str, ...]:
        steps: list[str] = []
        while index >= 0:
            index, more = self._parents[index]
            steps[:0] = more
        return tuple(steps)


def _check_keywords(root: object, node: dict[str, Any], path: tuple[str, ...], param: str) -> None:
    for key in node:
        if key in UNENFORCEABLE:
            raise InvalidRequestError(
                f"{_dotted(param, (*path, key))}: the keyword '{key}' cannot be enforced while generating; "
                "this server supports type, enum, const, anyOf, allOf, oneOf (disjoint), $ref, properties, "
                "required, additionalProperties, items, prefixItems, min/maxItems, min/maxLength, pattern, "
                "format, minimum, maximum and their exclusive forms, multipleOf",
                param=_dotted(param, (*path, key)),
                code="unsupported_schema_keyword",
            )
    ref = node.get("$ref")
    if ref is not None:
        _resolve(root, ref, _dotted(param, (*path, "$ref")))


def _resolve(root: object, ref: object, where: str) -> object:
    """The subschema ``ref`` points at, or a 400 for a ref that is remote or does not resolve."""
    if not isinstance(ref, str) or not ref.startswith("#") or (len(ref) > 1 and ref[1] != "/"):
        raise InvalidRequestError(
            f"{where}: only references inside the schema are supported ('#' or '#/$defs/NAME'), got {ref!r:.100}",
            param=where,
        )
    node = root
    for raw in ref[2:].split("/") if len(ref) > 1 else ():
        step = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and step in node:
            node = node[step]
        elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        else:
            raise InvalidRequestError(f"{where}: {ref!r:.100} does not resolve in the schema", param=where)
    if not isinstance(node, dict | bool):
        raise InvalidRequestError(f"{where}: {ref!r:.100} does not point at a schema", param=where)
    return node


class _Graph:
    """The schema as an and-or graph: a node is productive when each of its clauses has a productive node."""

    def __init__(self) -> None:
        self.clauses: list[list[list[int]]] = []

    def node(self, clauses: list[list[int]] | None = None) -> int:
        self.clauses.append(clauses if clauses is not None else [])
        return len(self.clauses) - 1

    def productive(self) -> list[bool]:
        done = [False] * len(self.clauses)
        waiting = [len(c) for c in self.clauses]
        watchers: list[list[tuple[int, int]]] = [[] for _ in self.clauses]
        for owner, clauses in enumerate(self.clauses):
            for ci, clause in enumerate(clauses):
                for child in clause:
                    watchers[child].append((owner, ci))
        satisfied: set[tuple[int, int]] = set()
        ready = deque(n for n, w in enumerate(waiting) if w == 0)
        while ready:
            n = ready.popleft()
            if done[n]:
                continue
            done[n] = True
            for owner, ci in watchers[n]:
                if (owner, ci) not in satisfied:
                    satisfied.add((owner, ci))
                    waiting[owner] -= 1
                    if waiting[owner] == 0:
                        ready.append(owner)
        return done

    def reaches(self, start: int, goal: int, productive: list[bool]) -> bool:
        """Whether ``goal`` is reachable from ``start`` through nodes that are not productive."""
        seen = {start}
        todo = [start]
        while todo:
            n = todo.pop()
            if n == goal:
                return True
            for clause in self.clauses[n]:
                for child in clause:
                    if not productive[child] and child not in seen:
                        seen.add(child)
                        todo.append(child)
        return False


def _check_base_case(root: object, subschemas: _Subschemas, param: str) -> None:
    graph = _Graph()
    anything = graph.node()  # `true`, `{}`, a missing subschema
    nothing = graph.node([[]])  # `false`, `enum: []`
    index: dict[int, int] = {}
    for node in subschemas.nodes:
        if isinstance(node, dict):
            index[id(node)] = graph.node()

    def of(schema: object) -> int:
        if isinstance(schema, dict):
            return index.get(id(schema), anything)  # unreached shapes are not judged: assume satisfiable
        return nothing if schema is False else anything

    refs: list[tuple[int, object, int]] = []
    for at, node in enumerate(subschemas.nodes):
        if not isinstance(node, dict):
            continue
        clauses = graph.clauses[index[id(node)]]
        if "$ref" in node:
            target = of(_resolve(root, node["$ref"], param))
            clauses.append([target])
            refs.append((at, node["$ref"], target))
        for part in node.get("allOf") or ():
            clauses.append([of(part)])
        for key in ("anyOf", "oneOf"):
            if isinstance(node.get(key), list):
                clauses.append([of(part) for part in node[key]])
        if "enum" in node or "const" in node:
            if node.get("enum") == []:
                clauses.append([nothing])
            continue  # a listed value needs nothing more
        types = node.get("type", list(_TYPES))
        types = [types] if isinstance(types, str) else types
        if any(t not in ("object", "array") for t in types):
            continue  # a string, number, boolean or null will do
        options = []
        if "object" in types:
            options.append(graph.node([[of(_property(node, name))] for name in node.get("required") or ()]))
        if "array" in types:
            options.append(graph.node([[of(item)] for item in _needed_items(node)]))
        clauses.append(options)
    productive = graph.productive()
    if productive[of(root)]:
        return
    stuck = [(at, ref, target) for at, ref, target in refs if not productive[target]]
    for at, ref, target in stuck[:20]:  # bounded: each look is linear in the schema
        if graph.reaches(target, index[id(subschemas.nodes[at])], productive):
            where = _dotted(param, (*subschemas.path(at), "$ref"))
            raise InvalidRequestError(
                f"{where}: no finite JSON value satisfies the schema: it recurses through "
                f"{ref!r:.100} with no way to end (make the recursive property optional)",
                param=where,
            )
    raise InvalidRequestError(f"{param}: no JSON value satisfies the schema", param=param)


def _property(node: dict[str, Any], name: object) -> object:
    """The schema a required property's value must satisfy."""
    properties = node.get("properties")
    if isinstance(properties, dict) and name in properties:
        return properties[name]
    if node.get("patternProperties"):
        return True  # may match a pattern: not judged
    return node.get("additionalProperties", True)


def _needed_items(node: dict[str, Any]) -> list[object]:
    """The schemas of the items an array must hold (``minItems`` of them)."""
    least = node.get("minItems", 0)
    least = least if isinstance(least, int) else 0
    prefix = node.get("prefixItems")
    prefix = prefix if isinstance(prefix, list) else []
    needed = prefix[:least]
    if least > len(prefix):
        items = node.get("items", True)
        needed.append(items if isinstance(items, dict | bool) else True)
    return needed
