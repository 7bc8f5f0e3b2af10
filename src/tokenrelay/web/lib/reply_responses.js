// The OpenAI Responses API, read into reply events (the `responses` dialect of `tokenrelay/reply`).
//
// Each SSE event is named (`event: response.output_text.delta`…) and its data is a JSON object whose `type`
// repeats the name (the `type` is what is read, the name when there is none). What is read — the rules of the
// Python reader (tokenrelay.wire._responses_reader.ResponsesStreamDecoder), checked on the same vectors
// (tests/vectors/reply_dialects.json):
//
//   response.output_text.delta            its `delta` is answer text (a string, else a protocol error)
//   response.reasoning_text.delta         its `delta` is reasoning, apart from the answer
//   response.output_item.added            an item of type `function_call` starts a tool call (its `call_id`,
//                                         `name`, and `arguments` when it already holds some)
//   response.function_call_arguments.delta  more arguments for the call of its `output_index`
//   response.completed                    the end: `tool_calls` when the reply called a tool, else `stop`;
//                                         the usage from `response.usage` (input_tokens, output_tokens)
//   response.incomplete                   the end, cut: `length` (for max_output_tokens), else its reason
//   error, response.failed                the server's error: an `error` event of code `server`
//
// Anything else (created, in_progress, content_part.*, *.done, output_item.done…) adds nothing. Data that
// is not a JSON object, arguments for a call that never started and a usage without integer counts are
// protocol errors. A stream that stops before its end event is a `truncated` error, whatever it looks like.

import { failed, isCount, isObject, wellFormed } from './reply_events.js';

/**
 * The responses dialect as a reply reader: feed(sseEvent) → ReplyEvent[], then finish() → the last events
 * (a `truncated` error when the end event never came). `done` says that nothing more needs reading.
 * Contract: for any cutting of the byte stream into SSE events (the SSE parser's contract), the joined
 * events are the same.
 */
export class ResponsesReader {
  constructor() {
    this._ended = false;
    /** @type {Map<unknown, number>} a call's output_index → its index among the reply's calls */
    this._calls = new Map();
  }

  /** Whether the reply has ended (its end event, or an error): later events are not read. */
  get done() {
    return this._ended;
  }

  /** @param {{type: string, data: string}} event @returns {import('./reply_events.js').ReplyEvent[]} */
  feed(event) {
    if (this._ended) return [];
    let data;
    try {
      data = JSON.parse(event.data);
    } catch {
      return this._fail(`a Responses event is not JSON: ${event.data.slice(0, 120)}`, 'protocol');
    }
    if (!isObject(data)) return this._fail('a Responses event is not a JSON object', 'protocol');
    const kind = typeof data.type === 'string' ? data.type : event.type;
    switch (kind) {
      case 'response.output_text.delta':
        if (typeof data.delta !== 'string')
          return this._fail('an output_text delta without text', 'protocol');
        return data.delta === '' ? [] : [{ type: 'text', text: wellFormed(data.delta) }];
      case 'response.reasoning_text.delta':
        return typeof data.delta === 'string' && data.delta !== ''
          ? [{ type: 'reasoning', text: wellFormed(data.delta) }]
          : [];
      case 'response.output_item.added':
        return this._started(data);
      case 'response.function_call_arguments.delta': {
        const index = this._calls.get(data.output_index ?? -1);
        if (index === undefined) return this._fail('arguments for a call that never started', 'protocol');
        if (typeof data.delta !== 'string') return this._fail('arguments that are not text', 'protocol');
        return data.delta === ''
          ? []
          : [{ type: 'tool-call-delta', index, arguments: wellFormed(data.delta) }];
      }
      case 'response.completed':
      case 'response.incomplete':
        return this._end(data.response, kind === 'response.incomplete');
      case 'error':
        return this._fail(messageOf(data.message), 'server');
      case 'response.failed': {
        const error = isObject(data.response) ? data.response.error : null;
        return this._fail(messageOf(isObject(error) ? error.message : null, 'the response failed'), 'server');
      }
      default:
        return [];
    }
  }

  /** A `function_call` item starts a call (other items add nothing). */
  _started(data) {
    const item = data.item;
    if (!isObject(item) || item.type !== 'function_call') return [];
    if (typeof item.name !== 'string' || item.name === '')
      return this._fail('a function_call without a name', 'protocol');
    const index = this._calls.size;
    this._calls.set(data.output_index ?? index, index);
    const id = typeof item.call_id === 'string' ? item.call_id : null;
    const out = [{ type: 'tool-call-start', index, id, name: item.name }];
    if (typeof item.arguments === 'string' && item.arguments !== '')
      out.push({ type: 'tool-call-delta', index, arguments: wellFormed(item.arguments) });
    return out;
  }

  /** response.completed or response.incomplete: the finish, with its reason and usage. */
  _end(response, incomplete) {
    if (!isObject(response)) return this._fail('a Responses end event without its response', 'protocol');
    let usage = null;
    if (isObject(response.usage)) {
      const { input_tokens: input, output_tokens: output } = response.usage;
      if (!isCount(input) || !isCount(output)) return this._fail('bad usage from the server', 'protocol');
      usage = { inputTokens: input, outputTokens: output };
    }
    let reason;
    if (incomplete) {
      const why = isObject(response.incomplete_details) ? response.incomplete_details.reason : null;
      reason = why === null || why === undefined || why === 'max_output_tokens' ? 'length' : String(why);
    } else {
      const output = Array.isArray(response.output) ? response.output : [];
      const called = this._calls.size > 0 || output.some((i) => isObject(i) && i.type === 'function_call');
      reason = called ? 'tool_calls' : 'stop';
    }
    this._ended = true;
    return [{ type: 'finish', reason, usage }];
  }

  _fail(message, code) {
    this._ended = true;
    return [failed(message, code)];
  }

  /** The end of the stream: nothing when the reply ended, else a `truncated` error. */
  finish() {
    if (this._ended) return [];
    return this._fail('the stream ended before the reply was finished (no response.completed)', 'truncated');
  }
}

function messageOf(message, otherwise = 'the server reported an error') {
  return typeof message === 'string' && message !== '' ? message : otherwise;
}
