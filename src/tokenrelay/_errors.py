"""One error tree for the whole relay.

Every error tokenrelay raises derives from :class:`TokenRelayError`. Each class knows the HTTP status and the
error ``type`` of each dialect it maps to (OpenAI's, and Anthropic's for the Messages API, whose status
differs for two of them), so the server turns any of them into an error body of the endpoint's dialect
without a lookup table of its own::

    TokenRelayError                      500 server_error            api_error
    ├── ConfigError                      500 server_error            api_error     bad option, model file, engine setup
    ├── TokenizerError                   500 server_error            api_error     tokenizer missing, truncated, unsupported
    ├── ProtocolError                    502 server_error            api_error     a peer broke the SSE / OpenAI wire format
    │   ├── StreamTruncated              502 server_error            api_error     the stream ended before it finished
    │   └── JSONError (+ ValueError)     502 server_error            api_error     text that must be JSON is not
    │       ├── JSONSyntaxError          502 server_error            api_error     it cannot be continued into JSON
    │       └── TruncatedJSONError       502 server_error            api_error     it ended before the value did
    ├── EngineError                      500 server_error            api_error     the model failed mid-generation
    ├── ToolCallError                    500 server_error            api_error     the reply's tool call is malformed
    ├── UseAfterFinishError              500 server_error            api_error     input after finish()/close() (a caller's bug)
    ├── UnavailableError                 503 server_error            overloaded_error (529)  the server is shutting down
    └── InvalidRequestError              400 invalid_request_error   invalid_request_error
        ├── AuthenticationError          401 authentication_error    authentication_error
        ├── NotFoundError                404 not_found_error         not_found_error
        ├── RequestTimeoutError          408 invalid_request_error   invalid_request_error   the body did not arrive in time
        ├── PayloadTooLargeError         413 invalid_request_error   invalid_request_error
        └── RateLimitError               429 rate_limit_error        rate_limit_error

Errors carry plain data (``param``, ``code``, a JSON error's ``offset`` or partial ``value``), never a request
object. The JSON errors are each a ``ValueError`` as well, so code written for ``json.loads`` (which raises
``json.JSONDecodeError``, a ``ValueError``) keeps working with ``except ValueError``; they sit under
``ProtocolError`` because a reply that was asked to be JSON and is not broke the format the client asked for
(``response_format``), as a broken SSE frame breaks the wire's.

One rule for every incremental object (``Detokenizer``, ``StopMatcher``, ``TextStream``, ``SSEParser``, the
chunk writers, the doctor's ``ContentDecoder``): its end method (``finish()``, ``close()``, ``flush()``) says the
input is over. Calling it again returns nothing new (``""``, ``[]``, ``b""``); giving the object input after it
raises :class:`UseAfterFinishError`, never a silent restart. An object that ends the stream by itself before
that (a stop string, ``TextStream``'s ``Finished``) drops further input instead: text after a stop is dropped
whether it comes in the same call or a later one, so every split of the input gives the same result.
"""

from __future__ import annotations

from ._json_events import JSONEvent, JSONValue

__all__ = [
    "AuthenticationError",
    "ConfigError",
    "EngineError",
    "InvalidRequestError",
    "JSONError",
    "JSONSyntaxError",
    "NotFoundError",
    "PayloadTooLargeError",
    "ProtocolError",
    "RateLimitError",
    "RequestTimeoutError",
    "StreamTruncated",
    "TokenRelayError",
    "TokenizerError",
    "ToolCallError",
    "TruncatedJSONError",
    "UnavailableError",
    "UseAfterFinishError",
]


class TokenRelayError(Exception):
    """Root of every error tokenrelay raises."""

    status_code: int = 500
    error_type: str = "server_error"
    #: The Anthropic Messages API's error ``type`` and, where it differs from ``status_code``, its status.
    anthropic_type: str = "api_error"
    anthropic_status_code: int | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def to_openai(self) -> dict[str, dict[str, str | None]]:
        """The OpenAI error body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    @property
    def anthropic_status(self) -> int:
        """The HTTP status of this error on the Messages API (``status_code`` unless Anthropic's differs)."""
        return self.anthropic_status_code or self.status_code

    def to_anthropic(self) -> dict[str, object]:
        """The Anthropic error body: ``{"type": "error", "error": {"type", "message"}}``. Anthropic's errors
        have no ``param``: the message names the field (prefixed with it where it does not already)."""
        message = self.message
        if self.param and self.param not in message:
            message = f"{self.param}: {message}"
        return {"type": "error", "error": {"type": self.anthropic_type, "message": message}}


class ConfigError(TokenRelayError):
    """A bad option, model path or engine setup, found before any stream starts."""


class TokenizerError(TokenRelayError):
    """A tokenizer source that is missing, truncated, or not a tokenizer of a known family."""


class ProtocolError(TokenRelayError):
    """A peer broke the wire format (SSE framing, OpenAI chunk shape, a limit on event size)."""

    status_code = 502


class StreamTruncated(ProtocolError):
    """The stream ended (EOF) before the server said it was finished."""


class JSONError(ProtocolError, ValueError):
    """Text that must be one JSON value (RFC 8259) is not: the family of :class:`JSONSyntaxError` and
    :class:`TruncatedJSONError` (``tokenrelay.PartialJSON``)."""


class JSONSyntaxError(JSONError):
    """The text cannot be continued into valid JSON; ``offset`` is the offending character's offset in the
    whole document (code points in Python, UTF-16 code units in the JS twin).

    ``events`` are the events the failing ``feed`` produced before that character, so that the events of every
    split of a document, joined, are the same up to the error."""

    def __init__(self, message: str, *, offset: int, events: tuple[JSONEvent, ...] = ()) -> None:
        super().__init__(f"{message} at offset {offset}")
        self.offset = offset
        self.events = events


class TruncatedJSONError(JSONError):
    """The text ended before its JSON value did (``finish()`` on an incomplete document, or a reply cut by
    ``max_tokens``); ``value`` is the snapshot so far (``None`` when no value had started)."""

    def __init__(self, message: str, *, value: JSONValue = None) -> None:
        super().__init__(message)
        self.value = value


class EngineError(TokenRelayError):
    """The engine failed while generating."""


class ToolCallError(TokenRelayError):
    """The model's reply broke its tool-call format (``_tool_calls``: JSON that cannot continue, a call without
    a name, a reply that stops inside a call): never passed off as a complete call."""


class UseAfterFinishError(TokenRelayError, RuntimeError):
    """An incremental object got input after its ``finish()``/``close()``/``flush()`` (see the module docstring).

    A bug in the caller, not in the stream: a ``RuntimeError`` as well, like any use of a closed object."""


class UnavailableError(TokenRelayError):
    """The server cannot finish the request now (it is shutting down); the client may retry elsewhere."""

    status_code = 503
    anthropic_type = "overloaded_error"
    anthropic_status_code = 529  # Anthropic's "overloaded": its SDKs retry it, as they retry a 503


class InvalidRequestError(TokenRelayError):
    """The client sent a request that cannot be served as it is."""

    status_code = 400
    error_type = "invalid_request_error"
    anthropic_type = "invalid_request_error"


class AuthenticationError(InvalidRequestError):
    status_code = 401
    error_type = "authentication_error"
    anthropic_type = "authentication_error"


class NotFoundError(InvalidRequestError):
    status_code = 404
    error_type = "not_found_error"
    anthropic_type = "not_found_error"


class RequestTimeoutError(InvalidRequestError):
    status_code = 408


class PayloadTooLargeError(InvalidRequestError):
    status_code = 413


class RateLimitError(InvalidRequestError):
    status_code = 429
    error_type = "rate_limit_error"
    anthropic_type = "rate_limit_error"

    def __init__(
        self, message: str, *, retry_after: float = 1.0, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message, param=param, code=code)
        self.retry_after = retry_after
