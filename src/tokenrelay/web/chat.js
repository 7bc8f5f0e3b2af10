// The chat completions stream, from the page's side: POST /v1/chat/completions with stream: true, read the
// SSE body, and tell a finished answer from a stopped, failed or truncated one (the page must never show a
// cut-off answer as a whole one).
//
// OpenAI streaming format: each `data:` line holds a chat.completion.chunk; text is in
// choices[0].delta.content, the end in choices[0].finish_reason; with stream_options.include_usage a last
// chunk with `choices: []` carries `usage`; `data: [DONE]` closes the stream. A server that fails mid-stream
// sends `data: {"error": {...}}`. A stream that ends without finish_reason or [DONE] is truncated: the answer
// may look complete but is not.

import { SSEParser } from './sse.js';

/**
 * @typedef {'finished' | 'stopped' | 'error' | 'truncated'} Status
 * @typedef {{ttftMs: number | null, tokens: number, tokensPerSecond: number | null}} Stats
 * @typedef {Stats & {
 *   status: Status, content: string, finishReason: string | null, error: string | null,
 *   toolCalls: {index: number, id: string | null, name: string, arguments: string}[],
 *   httpStatus: number | null, usage: {prompt_tokens?: number, completion_tokens?: number} | null,
 *   totalMs: number,
 * }} Outcome httpStatus: the status of a response that refused the request (401, 404, 429…), else null
 */

/**
 * The stream's numbers so far. Tokens per second of generation run from the first token to the last, so
 * TTFT is not counted twice; while streaming `tokens` counts content chunks (the usage chunk comes last).
 * @param {{started: number, firstAt: number | null, lastAt: number | null, tokens: number}} times
 * @returns {Stats}
 */
export function streamStats({ started, firstAt, lastAt, tokens }) {
  const span = firstAt !== null && lastAt > firstAt ? (lastAt - firstAt) / 1000 : 0;
  return {
    ttftMs: firstAt === null ? null : firstAt - started,
    tokens,
    tokensPerSecond: span > 0 && tokens > 1 ? (tokens - 1) / span : null,
  };
}

const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value);
const isCount = (value) => typeof value === 'number' && Number.isInteger(value);

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
  }

  /** @param {{data: string}} event @returns {string} content added by this event */
  feed(event) {
    this.toolDeltas = [];
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
    const text = isObject(choice.delta) ? choice.delta.content : choice.text;
    if (typeof text !== 'string' || text === '') return '';
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
        arguments: args,
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
 * POST one chat request and stream the reply. Never throws: every ending is an Outcome.
 * `params` go into the request body beside model and messages (temperature, max_tokens); `apiKey`, when
 * set, is sent as a bearer token. onDelta gets each piece of text, the stream's numbers so far, and its hop
 * times: {arrive, parse, timing}, when the network chunk holding it arrived (with `stepTimes`, else null)
 * and when it was parsed (`now` times), and the chunk's server timing (its `tokenrelay` field, asked for
 * with `stepTimes`) or null. onToolCall, when given, gets the reply's tool calls so far (each with its
 * arguments joined) whenever a chunk adds to them.
 * @param {{
 *   model: string, messages: {role: string, content: string}[],
 *   onDelta: (text: string, stats: Stats, hop: {arrive: number, parse: number, timing: object|null}) => void,
 *   onToolCall?: (calls: {index: number, id: string | null, name: string, arguments: string}[]) => void,
 *   params?: object, apiKey?: string, stepTimes?: boolean,
 *   signal?: AbortSignal, url?: string, fetch?: typeof fetch, now?: () => number,
 * }} options
 * @returns {Promise<Outcome>}
 */
export async function streamChat({
  model,
  messages,
  onDelta,
  onToolCall,
  params = {},
  apiKey = '',
  stepTimes = false,
  signal,
  url = '/v1/chat/completions',
  ...io
}) {
  const fetchImpl = io.fetch ?? globalThis.fetch.bind(globalThis);
  const now = io.now ?? (() => globalThis.performance.now());
  const reader = new ChunkReader();
  const started = now();
  let firstAt = null;
  let lastAt = null;
  let httpStatus = null;
  const outcome = (status, error = reader.error) => {
    const end = now();
    const tokens = reader.usage?.completion_tokens ?? reader.chunks;
    return {
      status,
      content: reader.content,
      toolCalls: reader.toolCalls,
      finishReason: reader.finishReason,
      error,
      httpStatus,
      usage: reader.usage,
      totalMs: end - started,
      ...streamStats({ started, firstAt, lastAt, tokens }),
    };
  };
  const headers = { 'Content-Type': 'application/json', Accept: 'text/event-stream' };
  if (apiKey !== '') headers.Authorization = `Bearer ${apiKey}`;

  let body;
  try {
    const response = await fetchImpl(url, {
      method: 'POST',
      headers,
      body: JSON.stringify({
        ...params,
        model,
        messages,
        stream: true,
        // include_step_times: tokenrelay's extension (the relay lanes); asked for only when they are shown.
        stream_options: stepTimes
          ? { include_usage: true, include_step_times: true }
          : { include_usage: true },
      }),
      signal,
    });
    if (!response.ok) {
      httpStatus = response.status;
      return outcome('error', await errorMessage(response));
    }
    const type = response.headers.get('Content-Type') ?? '';
    if (!type.startsWith('text/event-stream') || !response.body) {
      return outcome('error', `expected an event stream, got ${type || 'no content type'}`);
    }
    body = response.body.getReader();
  } catch (error) {
    return outcome(signal?.aborted ? 'stopped' : 'error', signal?.aborted ? null : describe(error));
  }

  const parser = new SSEParser();
  try {
    for (;;) {
      const { done, value } = await body.read();
      if (done) break;
      const arrive = stepTimes ? now() : null; // the relay's network arrival; no clock read otherwise
      for (const event of parser.feed(value)) {
        const text = reader.feed(event);
        if (text !== '') {
          lastAt = now();
          firstAt ??= lastAt;
          const hop = { arrive, parse: lastAt, timing: reader.timing };
          onDelta(text, streamStats({ started, firstAt, lastAt, tokens: reader.chunks }), hop);
        }
        if (reader.toolDeltas.length > 0) onToolCall?.(reader.toolCalls);
      }
      if (reader.done || reader.error !== null) {
        // Nothing after [DONE] or an error event matters; let the connection go.
        body.cancel().catch(() => {});
        return outcome(reader.status());
      }
    }
    parser.close();
  } catch (error) {
    if (signal?.aborted) return outcome('stopped', null);
    // The connection broke, or the stream broke the SSE parser's limit: whatever came is not the answer.
    return outcome(reader.error !== null ? 'error' : 'truncated', reader.error ?? describe(error));
  }
  // A finish_reason is enough to call the answer whole, even if the stream was cut after it (parser.truncated
  // then only means the usage chunk or [DONE] was lost).
  return outcome(reader.status());
}

async function errorMessage(response) {
  let text = '';
  try {
    text = await response.text();
    const message = JSON.parse(text)?.error?.message;
    if (message) return `${response.status}: ${message}`;
  } catch {
    // Not an OpenAI error body: show the status and the start of whatever came.
  }
  return `${response.status} ${response.statusText}${text ? `: ${text.slice(0, 200)}` : ''}`.trim();
}

function describe(error) {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
