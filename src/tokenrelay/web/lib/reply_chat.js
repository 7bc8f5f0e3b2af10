// Chat Completions, read into reply events (the `chat-completions` dialect of `tokenrelay/reply`).
//
// OpenAI's streaming format: each `data:` line holds a chat.completion.chunk; text is in
// choices[0].delta.content, reasoning (where a server sends it apart) in delta.reasoning_content or
// delta.reasoning, tool calls in delta.tool_calls, the end in choices[0].finish_reason; with
// stream_options.include_usage a last chunk with `choices: []` carries `usage`; `data: [DONE]` closes the
// stream. A server that fails mid-stream sends `data: {"error": {...}}`. A stream that ends without
// finish_reason or [DONE] is truncated: the answer may look complete but is not.
//
// ChunkReader holds the rules (the Python client's, on the shared vectors); ChatCompletionsReader turns
// what each chunk added into reply events (reply.js names them). The `finish` event waits for the usage
// chunk: it comes at [DONE], or at the end of the stream when a finish_reason was seen; it is never made up
// from the text, so a reply cut before its finish_reason ends with a `truncated` error whatever it looks
// like, and a caller that parses the text as JSON learns from `finish.reason` (`length`,
// `content_filter`) that it was cut before it parses anything.

import { ReplyError, isCount, isObject, wellFormed } from './reply_events.js';

/**
 * Reads the chunks of one reply (sans-I/O): feed(event) returns the new content text, if any.
 * The fields say where the stream stands; status() names the outcome once the stream has ended.
 * The rules are the Python client's (tokenrelay.wire._chat_reader.ChatStreamDecoder and choice_content), checked on
 * the same vectors (tests/vectors/chat_chunks.json): data that is not a JSON object, or a usage without
 * integer counts, is a protocol error; an `error` member is the server's error; an object without a
 * `choices` list is not a chunk and adds nothing; the choice read is the one whose index is 0 (a missing
 * index is 0): its delta.content (or a legacy text) and its finish_reason, when they are strings.
 * Tool calls (delta.tool_calls, issue 21) gather in `toolCalls`, one per index in the order they started:
 * tool_calls must be a list of objects with an integer index ≥ 0, a `function` (when present) an object whose
 * `arguments` (when present and not null) is a string; a call's first delta must name its function; later
 * ones add argument fragments (an id or name they repeat is ignored). Anything else is a protocol error.
 */
export class ChunkReader {
  constructor() {
    this.content = '';
    this.finishReason = null;
    this.usage = null;
    this.error = null;
    this.errorKind = null; // 'protocol' (not a chunk we can read) or 'server' (an in-stream error)
    this.done = false; // [DONE] seen
    this.chunks = 0; // chunks that carried content: the token count when the server sends no usage
    this.notChunks = 0; // JSON objects without a choices list (ignored)
    this.timing = null; // the last chunk's `tokenrelay` field (stream_options.include_step_times), if any
    /** @type {{index: number, id: string | null, name: string, arguments: string}[]} */
    this.toolCalls = [];
    this.toolDeltas = []; // the last event's tool-call deltas: {index, id, name, arguments} (null when absent)
    this.reasoning = ''; // delta.reasoning_content (vLLM, DeepSeek, llama-server) or delta.reasoning, joined
    this.reasoningDelta = ''; // the last event's reasoning text
  }

  /** @param {{data: string}} event @returns {string} content added by this event */
  feed(event) {
    this.toolDeltas = [];
    this.reasoningDelta = '';
    if (this.done || this.error !== null) return '';
    if (event.data === '[DONE]') {
      this.done = true;
      return '';
    }
    let chunk;
    try {
      chunk = JSON.parse(event.data);
    } catch {
      return this.fail('protocol', `bad chunk from the server: ${event.data.slice(0, 120)}`);
    }
    if (!isObject(chunk)) return this.fail('protocol', 'bad chunk from the server');
    if (chunk.error !== undefined && chunk.error !== null) {
      const message = isObject(chunk.error) ? chunk.error.message : chunk.error;
      return this.fail('server', String(message || 'the server reported an error'));
    }
    if (isObject(chunk.usage)) {
      if (!isCount(chunk.usage.prompt_tokens) || !isCount(chunk.usage.completion_tokens))
        return this.fail('protocol', 'bad usage from the server');
      this.usage = chunk.usage;
    }
    this.timing = isObject(chunk.tokenrelay) ? chunk.tokenrelay : null;
    if (!Array.isArray(chunk.choices)) {
      this.notChunks += 1;
      return '';
    }
    const choice = chunk.choices.find((c) => isObject(c) && (Object.hasOwn(c, 'index') ? c.index : 0) === 0);
    if (choice === undefined) return '';
    if (isObject(choice.delta) && choice.delta.tool_calls !== undefined && choice.delta.tool_calls !== null) {
      const problem = this.readToolCalls(choice.delta.tool_calls);
      if (problem !== null) return this.fail('protocol', problem);
    }
    if (typeof choice.finish_reason === 'string') this.finishReason = choice.finish_reason;
    if (isObject(choice.delta)) {
      const thought = choice.delta.reasoning_content ?? choice.delta.reasoning;
      if (typeof thought === 'string' && thought !== '') {
        this.reasoning += wellFormed(thought);
        this.reasoningDelta = wellFormed(thought);
      }
    }
    let text = isObject(choice.delta) ? choice.delta.content : choice.text;
    if (typeof text !== 'string' || text === '') return '';
    text = wellFormed(text);
    this.content += text;
    this.chunks += 1;
    return text;
  }

  /** Reads one delta's tool_calls into `toolCalls`; a description of what is wrong, or null. */
  readToolCalls(calls) {
    if (!Array.isArray(calls)) return 'bad tool calls from the server';
    const deltas = [];
    for (const call of calls) {
      if (!isObject(call) || !isCount(call.index) || call.index < 0) return 'bad tool call from the server';
      const fn = call.function ?? {};
      if (!isObject(fn)) return 'bad tool call from the server';
      const args = fn.arguments ?? '';
      if (typeof args !== 'string') return 'bad tool call arguments from the server';
      deltas.push({
        index: call.index,
        id: typeof call.id === 'string' ? call.id : null,
        name: typeof fn.name === 'string' ? fn.name : null,
        arguments: wellFormed(args),
      });
    }
    for (const delta of deltas) {
      let known = this.toolCalls.find((c) => c.index === delta.index);
      if (known === undefined) {
        if (!delta.name) return `tool call ${delta.index} has no function name`;
        known = { index: delta.index, id: delta.id, name: delta.name, arguments: '' };
        this.toolCalls.push(known);
      }
      known.arguments += delta.arguments;
    }
    this.toolDeltas = deltas;
    return null;
  }

  /** @returns {''} */
  fail(kind, message) {
    this.errorKind = kind;
    this.error = message;
    return '';
  }

  /** The outcome of a stream that has ended (EOF or [DONE]). */
  status() {
    if (this.error !== null) return 'error';
    return this.done || this.finishReason !== null ? 'finished' : 'truncated';
  }
}

/**
 * The chat-completions dialect as a reply reader: feed(sseEvent) → ReplyEvent[], then finish() → the last
 * events (`finish`, or an `error`). `done` says that nothing more needs reading ([DONE] or an error came).
 * Contract: for any cutting of the byte stream into SSE events (the SSE parser's contract), the joined
 * events are the same.
 */
export class ChatCompletionsReader {
  constructor() {
    this._chunks = new ChunkReader();
    this._started = new Set(); // tool-call indexes announced
    this._ended = false;
  }

  /** Whether the reply has ended ([DONE], or an error): later events are not read. */
  get done() {
    return this._ended || this._chunks.done || this._chunks.error !== null;
  }

  /** @param {{data: string}} event @returns {import('./reply_events.js').ReplyEvent[]} */
  feed(event) {
    if (this.done) return [];
    const reader = this._chunks;
    const text = reader.feed(event);
    const out = [];
    if (reader.reasoningDelta !== '') out.push({ type: 'reasoning', text: reader.reasoningDelta });
    if (text !== '') out.push({ type: 'text', text });
    for (const delta of reader.toolDeltas) {
      if (!this._started.has(delta.index)) {
        this._started.add(delta.index);
        const call = reader.toolCalls.find((c) => c.index === delta.index);
        out.push({ type: 'tool-call-start', index: call.index, id: call.id, name: call.name });
      }
      if (delta.arguments !== '')
        out.push({ type: 'tool-call-delta', index: delta.index, arguments: delta.arguments });
    }
    if (reader.error !== null || reader.done) out.push(...this.finish());
    return out;
  }

  /** The end of the stream: `finish` when a finish_reason or [DONE] came, else a `truncated` error. */
  finish() {
    if (this._ended) return [];
    this._ended = true;
    const reader = this._chunks;
    if (reader.error !== null) {
      const code = reader.errorKind === 'server' ? 'server' : 'protocol';
      return [{ type: 'error', error: new ReplyError(reader.error, code) }];
    }
    if (reader.finishReason === null && !reader.done) {
      const why = 'the stream ended before the reply was finished (no finish_reason)';
      return [{ type: 'error', error: new ReplyError(why, 'truncated') }];
    }
    return [{ type: 'finish', reason: reader.finishReason ?? 'stop', usage: usageOf(reader.usage) }];
  }
}

/** The usage in the event model's names, or null. */
function usageOf(usage) {
  if (usage === null) return null;
  return { inputTokens: usage.prompt_tokens, outputTokens: usage.completion_tokens };
}
