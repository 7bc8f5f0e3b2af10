"""The wire: each dialect's writer and reader over the one reply-event model, and the SSE framing under them.

Every module here is sans-I/O (standard library only, like the rest of the core; ``tests/test_layout.py``):

- ``_sse``: SSE frames written (``encode_event``) and read (``SSEParser``, WHATWG-exact);
- ``_chat`` / ``_chat_reader``: OpenAI Chat Completions (and the legacy text completions) written and read.
- ``_messages`` / ``_messages_reader``: the Anthropic Messages API written and read.

This package module imports nothing, so loading one dialect never loads another.
"""
