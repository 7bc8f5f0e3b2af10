"""schemathesis hooks for tests/test_server_schema.py (loaded through ``SCHEMATHESIS_HOOKS``).

Three rules of a chat request relate one field to another, which a JSON Schema cannot state: tool names are
unique, a named ``tool_choice`` names one of the request's tools, and a ``tool`` turn answers a call an earlier
turn made. A generated body that breaks one is schema-valid and still refused, with a 400 whose ``code`` names
the rule: only those refusals are not counted as failures. One more: a ``response_format`` schema using a
keyword no engine here enforces (``not``, ``if``, ...) is refused (``unsupported_schema_keyword``); the OpenAPI
document names those keywords in prose, since schemathesis cannot negate a ``false`` schema below the root.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData

CROSS_FIELD_RULES = frozenset(
    {"duplicate_tool_name", "unknown_tool", "unknown_tool_call", "unsupported_schema_keyword"}
)


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """False (drop the failure) for a schema-valid body refused by one of the cross-field rules."""
    if not isinstance(failure, RejectedPositiveData) or response.status_code != 400:
        return True
    try:
        code = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return True
    return code not in CROSS_FIELD_RULES
