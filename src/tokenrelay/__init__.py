"""tokenrelay: carry an LLM's streamed reply from the GPU to the pixel without breaking it.

The public names of the sans-I/O core and the tokenizer loader. Importing this package loads no server,
network or engine module.
"""

from ._detokenizer import DetokenizedPiece, Detokenizer, StrandedBytes
from ._errors import (
    AuthenticationError,
    ConfigError,
    EngineError,
    InvalidRequestError,
    JSONError,
    JSONSyntaxError,
    NotFoundError,
    PayloadTooLargeError,
    ProtocolError,
    RateLimitError,
    RequestTimeoutError,
    StreamTruncated,
    TokenizerError,
    TokenRelayError,
    ToolCallError,
    TruncatedJSONError,
    UnavailableError,
    UseAfterFinishError,
)
from ._json_events import JSONEvent, JSONPath, JSONValue, StringGrew, ValueCompleted, ValueStarted
from ._partial_json import PartialJSON
from ._protocols import ByteTable, Tokenizer
from ._reasoning import ReasoningSplitter
from ._stops import StopMatcher
from ._stream import Event, Finished, FinishReason, TextDelta, TextStream, Timings, Usage
from ._tool_calls import ToolCallExtractor
from .tokenizers import load_tokenizer
from .wire._chat import ChatChunkWriter, TextChunkWriter, chat_completion, error_event, text_completion
from .wire._chat_reader import ChatStreamDecoder
from .wire._sse import ServerSentEvent, SSEParser, encode_event

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "ByteTable",
    "ChatChunkWriter",
    "ChatStreamDecoder",
    "ConfigError",
    "DetokenizedPiece",
    "Detokenizer",
    "EngineError",
    "Event",
    "FinishReason",
    "Finished",
    "InvalidRequestError",
    "JSONError",
    "JSONEvent",
    "JSONPath",
    "JSONSyntaxError",
    "JSONValue",
    "NotFoundError",
    "PartialJSON",
    "PayloadTooLargeError",
    "ProtocolError",
    "RateLimitError",
    "ReasoningSplitter",
    "RequestTimeoutError",
    "SSEParser",
    "ServerSentEvent",
    "StopMatcher",
    "StrandedBytes",
    "StreamTruncated",
    "StringGrew",
    "TextChunkWriter",
    "TextDelta",
    "TextStream",
    "Timings",
    "TokenRelayError",
    "Tokenizer",
    "TokenizerError",
    "ToolCallError",
    "ToolCallExtractor",
    "TruncatedJSONError",
    "UnavailableError",
    "Usage",
    "UseAfterFinishError",
    "ValueCompleted",
    "ValueStarted",
    "__version__",
    "chat_completion",
    "encode_event",
    "error_event",
    "load_tokenizer",
    "text_completion",
]
