// The Anthropic Messages API, read into reply events (the `messages` dialect of `tokenrelay/reply`).
//
// A stream is `message_start`, then content blocks (`content_block_start`, `content_block_delta`…,
// `content_block_stop`, indexed from 0), then `message_delta` (the stop_reason and the output usage) and
// `message_stop`; `ping` may come anywhere, `error` ends a stream that failed. The rules are the Python
// reader's (tokenrelay.wire._messages_reader.MessagesStreamDecoder), checked on the same vectors
// (tests/vectors/reply_dialects.json):
//
// - the SSE event name is what is dispatched on, as the anthropic SDKs do; data that is not a JSON object,
//   or whose `type` differs from the name, is a protocol error;
// - a `text_delta` is answer text, a `thinking_delta` reasoning; a `tool_use` block starts a tool call (its
//   `id` and `name`; the calls are counted from 0 in the order they start) and its `input_json_delta`s are
//   the arguments; a block started out of order, or a delta for a block never started, is a protocol error;
// - the finish reason is the chat API's name of stop_reason (end_turn and stop_sequence → `stop`,
//   max_tokens → `length`, tool_use → `tool_calls`, refusal → `content_filter`); the usage is
//   message_start's input tokens and the last message_delta's output tokens;
// - `message_stop` ends the reply; a stream that stops after the stop_reason but before message_stop still
//   finished (as a chat stream that lost its [DONE]); one that stops before its stop_reason is a `truncated`
//   error; an `error` event is the server's error (code `server`). Other event types are skipped (Anthropic
//   may add some).

import { failed, isCount, isObject, wellFormed } from './reply_events.js';

/** Anthropic's stop_reason as the chat API's finish_reason (the Python reader's FINISH_REASONS). */
export const FINISH_REASONS = Object.freeze({
  end_turn: 'stop',
  stop_sequence: 'stop',
  max_tokens: 'length',
  tool_use: 'tool_calls',
  model_context_window_exceeded: 'length',
  refusal: 'content_filter',
  pause_turn: 'stop',
});

/**
 * The messages dialect as a reply reader: feed(sseEvent) → ReplyEvent[], then finish() → the last events.
 * `done` says that nothing more needs reading (message_stop, or an error).
 * Contract: for any cutting of the byte stream into SSE events (the SSE parser's contract), the joined
 * events are the same.
 */
export class MessagesReader {
  constructor() {
    this._ended = false;
    /** @type {string[]} each started block's type, by index */
    this._blocks = [];
    /** @type {Map<number, number>} a tool_use block's index → its index among the reply's calls */
    this._calls = new Map();
    this._input = null;
    this._output = null;
    this._reason = null;
  }

  /** Whether the reply has ended (message_stop, or an error): later events are not read. */
  get done() {
    return this._ended;
  }

  /** @param {{type: string, data: string}} event @returns {import('./reply_events.js').ReplyEvent[]} */
  feed(event) {
    const name = event.type;
    if (this._ended || name === 'ping') return [];
    if (name === 'error') {
      let message = null;
      try {
        const error = JSON.parse(event.data)?.error;
        if (isObject(error) && typeof error.message === 'string' && error.message !== '')
          message = error.message;
      } catch {
        // Not JSON: still the server's error, without its words.
      }
      return this._fail(message ?? 'the server reported an error', 'server');
    }
    let data;
    try {
      data = JSON.parse(event.data);
    } catch {
      return this._fail(`a Messages event is not JSON: ${event.data.slice(0, 120)}`, 'protocol');
    }
    if (!isObject(data)) return this._fail('a Messages event is not a JSON object', 'protocol');
    if (data.type !== name) return this._fail(`event ${name} carries data of type ${data.type}`, 'protocol');
    switch (name) {
      case 'message_start':
        return this._start(data);
      case 'content_block_start':
        return this._blockStart(data);
      case 'content_block_delta':
        return this._delta(data);
      case 'message_delta':
        return this._messageDelta(data);
      case 'message_stop':
        this._ended = true;
        return [{ type: 'finish', reason: this._reason ?? 'stop', usage: this._usage() }];
      default:
        return [];
    }
  }

  _start(data) {
    if (!isObject(data.message)) return this._fail('message_start without a message', 'protocol');
    const usage = data.message.usage;
    if (isObject(usage)) {
      this._input = isCount(usage.input_tokens) ? usage.input_tokens : null;
      this._output = isCount(usage.output_tokens) ? usage.output_tokens : null;
    }
    return [];
  }

  _blockStart(data) {
    const block = data.content_block;
    if (data.index !== this._blocks.length || !isObject(block))
      return this._fail('content_block_start out of order', 'protocol');
    const kind = String(block.type);
    const out = [];
    if (kind === 'tool_use') {
      if (typeof block.name !== 'string' || block.name === '')
        return this._fail('a tool_use block without a name', 'protocol');
      const index = this._calls.size;
      this._calls.set(this._blocks.length, index);
      out.push({
        type: 'tool-call-start',
        index,
        id: typeof block.id === 'string' ? block.id : null,
        name: block.name,
      });
    }
    this._blocks.push(kind);
    return out;
  }

  _delta(data) {
    if (!isCount(data.index) || data.index < 0 || data.index >= this._blocks.length)
      return this._fail('an event for a block that was not started', 'protocol');
    const delta = data.delta;
    if (!isObject(delta)) return this._fail('content_block_delta without a delta', 'protocol');
    switch (delta.type) {
      case 'text_delta':
        if (typeof delta.text !== 'string') return this._fail('a text_delta without text', 'protocol');
        return delta.text === '' ? [] : [{ type: 'text', text: wellFormed(delta.text) }];
      case 'thinking_delta':
        return typeof delta.thinking === 'string' && delta.thinking !== ''
          ? [{ type: 'reasoning', text: wellFormed(delta.thinking) }]
          : [];
      case 'input_json_delta': {
        const index = this._calls.get(data.index);
        if (index === undefined || typeof delta.partial_json !== 'string')
          return this._fail('an input_json_delta outside a tool_use block', 'protocol');
        const piece = wellFormed(delta.partial_json);
        return piece === '' ? [] : [{ type: 'tool-call-delta', index, arguments: piece }];
      }
      default:
        return []; // signature_delta, and kinds Anthropic may add
    }
  }

  _messageDelta(data) {
    const { delta, usage } = data;
    if (isObject(delta) && typeof delta.stop_reason === 'string')
      this._reason = Object.hasOwn(FINISH_REASONS, delta.stop_reason)
        ? FINISH_REASONS[delta.stop_reason]
        : delta.stop_reason;
    if (isObject(usage)) {
      if (!isCount(usage.output_tokens))
        return this._fail('message_delta with a malformed usage', 'protocol');
      this._output = usage.output_tokens;
      if (isCount(usage.input_tokens)) this._input = usage.input_tokens;
    }
    return [];
  }

  _usage() {
    if (this._input === null || this._output === null) return null;
    return { inputTokens: this._input, outputTokens: this._output };
  }

  _fail(message, code) {
    this._ended = true;
    return [failed(message, code)];
  }

  /** The end of the stream: `finish` when the stop_reason came, else a `truncated` error. */
  finish() {
    if (this._ended) return [];
    this._ended = true;
    if (this._reason !== null) return [{ type: 'finish', reason: this._reason, usage: this._usage() }];
    return [failed('the stream ended before the reply was finished (no stop_reason)', 'truncated')];
  }
}
