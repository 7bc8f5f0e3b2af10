// The chat completions stream, from the page's side: POST /v1/chat/completions with stream: true, read the
// SSE body, and tell a finished answer from a stopped, failed or truncated one (the page must never show a
// cut-off answer as a whole one). The chunks are read by the package's ChunkReader (lib/reply_chat.js, the
// same reader `tokenrelay/reply` uses); this module adds what the page shows: live numbers, hop times for
// the relay lanes, and an Outcome for every ending.

import { ChunkReader } from './lib/reply_chat.js';
import { SSEParser } from './lib/sse.js';

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

/**
 * POST one chat request and stream the reply. Never throws: every ending is an Outcome.
 * `params` go into the request body beside model and messages (temperature, max_tokens); `apiKey`, when
 * set, is sent as a bearer token. onDelta gets each piece of text, the stream's numbers so far, and its hop
 * times: {arrive, parse, timing}, when the network chunk holding it arrived (with `stepTimes`, else null)
 * and when it was parsed (`now` times), and the chunk's server timing (its `tokenrelay` field, asked for
 * with `stepTimes`) or null. onToolCall, when given, gets the reply's tool calls so far (each with its
 * arguments joined) whenever a chunk adds to them; onReasoning, each piece of reasoning the server sends
 * apart from the answer (issue 31), and when it was read.
 * @param {{
 *   model: string, messages: {role: string, content: string}[],
 *   onDelta: (text: string, stats: Stats, hop: {arrive: number, parse: number, timing: object|null}) => void,
 *   onToolCall?: (calls: {index: number, id: string | null, name: string, arguments: string}[]) => void,
 *   onReasoning?: (text: string, at: number) => void,
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
  onReasoning,
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
      reasoning: reader.reasoning,
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
        // Reasoning (issue 31) comes apart from the answer, never in the same delta's text.
        if (reader.reasoningDelta !== '') onReasoning?.(reader.reasoningDelta, now());
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
