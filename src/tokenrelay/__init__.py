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
    NotFoundError,
    PayloadTooLargeError,
    ProtocolError,
    RateLimitError,
    StreamTruncated,
    TokenizerError,
    TokenRelayError,
)
from ._protocols import ByteTable, Tokenizer
from .tokenizers import load_tokenizer

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "ByteTable",
    "ConfigError",
    "DetokenizedPiece",
    "Detokenizer",
    "EngineError",
    "InvalidRequestError",
    "NotFoundError",
    "PayloadTooLargeError",
    "ProtocolError",
    "RateLimitError",
    "StrandedBytes",
    "StreamTruncated",
    "TokenRelayError",
    "Tokenizer",
    "TokenizerError",
    "__version__",
    "load_tokenizer",
]
