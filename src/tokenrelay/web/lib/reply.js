// `tokenrelay/reply`: a streamed reply from a fetch Response, as reply events (reply_events.js), whatever
// the dialect. The SSE body is parsed with one SSEParser (one decoder per stream); each dialect is a small
// sans-I/O reader, feed(sseEvent) → events and finish() → the last ones, in a module of its own
// (reply_chat.js for Chat Completions, reply_responses.js for the OpenAI Responses API, reply_messages.js for
// the Anthropic Messages API). Adding a dialect is writing that reader and naming it in READERS.
//
// The dialect is the option `dialect`, or is told by the first event: the OpenAI Responses API names its
// events `response.*`, the Anthropic Messages API `message_start`, `content_block_*`…; Chat Completions sends
// unnamed `data:` events. A dialect with no reader (an option naming one READERS lacks) ends the read with
// an `error` (code `dialect`).

import { ChatCompletionsReader } from './reply_chat.js';
import { MessagesReader } from './reply_messages.js';
import { ResponsesReader } from './reply_responses.js';
import { ReplyError } from './reply_events.js';
import { SSEError, SSEParser } from './sse.js';

export { ReplyError } from './reply_events.js';
export { ChatCompletionsReader } from './reply_chat.js';
export { MessagesReader } from './reply_messages.js';
export { ResponsesReader } from './reply_responses.js';

/**
 * The readers by dialect: a function making a fresh reader for one reply.
 * @type {Record<string, () => {feed(event: import('./sse.js').ServerSentEvent): any[], finish(): any[], done: boolean}>}
 */
export const READERS = {
  'chat-completions': () => new ChatCompletionsReader(),
  responses: () => new ResponsesReader(),
  messages: () => new MessagesReader(),
};

const MESSAGES_EVENTS = new Set([
  'message_start',
  'message_delta',
  'message_stop',
  'content_block_start',
  'content_block_delta',
  'content_block_stop',
  'ping',
]);

/**
 * The dialect a stream speaks, from its first event.
 * @param {import('./sse.js').ServerSentEvent} event
 * @returns {'chat-completions' | 'responses' | 'messages'}
 */
export function detectDialect(event) {
  if (event.type.startsWith('response.')) return 'responses';
  if (MESSAGES_EVENTS.has(event.type)) return 'messages';
  return 'chat-completions';
}

/**
 * The reply events of a streamed response, ending with one `finish` or one `error`. Never throws for what
 * the server or the network did: an HTTP error status, a body that is not an event stream, an in-stream
 * error, a stream cut before its finish, an abort (the request's signal) are each an `error` event.
 * Breaking out of the loop early cancels the body.
 * @param {Response | Promise<Response>} response
 * @param {{dialect?: string, readers?: typeof READERS, maxEventBytes?: number}} [options]
 * @returns {AsyncGenerator<import('./reply_events.js').ReplyEvent, void, undefined>}
 */
export async function* readReply(response, { dialect, readers = READERS, maxEventBytes } = {}) {
  try {
    response = await response;
  } catch (error) {
    yield errorEvent(failure(error, 'the request failed'));
    return;
  }
  if (!response.ok) {
    yield errorEvent(new ReplyError(await errorMessage(response), 'http', { status: response.status }));
    return;
  }
  const type = response.headers.get('Content-Type') ?? '';
  if (!type.startsWith('text/event-stream') || !response.body) {
    response.body?.cancel().catch(() => {});
    const why = `expected an event stream, got ${type || 'no content type'}`;
    yield errorEvent(new ReplyError(why, 'not-sse', { status: response.status }));
    return;
  }
  const body = response.body.getReader();
  const parser = new SSEParser({ maxEventBytes });
  let reader = null;
  let ended = false;
  try {
    for (;;) {
      let chunk;
      try {
        chunk = await body.read();
      } catch (error) {
        ended = true;
        yield errorEvent(failure(error, 'the connection broke before the reply was finished'));
        return;
      }
      if (chunk.done) break;
      let events;
      try {
        events = parser.feed(chunk.value);
      } catch (error) {
        if (!(error instanceof SSEError)) throw error;
        ended = true;
        yield errorEvent(new ReplyError(error.message, 'protocol', { cause: error }));
        return;
      }
      for (const event of events) {
        if (reader === null) {
          const name = dialect ?? detectDialect(event);
          const make = Object.hasOwn(readers, name) ? readers[name] : null;
          if (make === null) {
            ended = true;
            yield errorEvent(new ReplyError(`no reader for the ${name} dialect`, 'dialect'));
            return;
          }
          reader = make();
        }
        for (const out of reader.feed(event)) yield out;
        if (reader.done) {
          ended = true;
          return;
        }
      }
    }
    parser.close();
    ended = true;
    if (reader === null) {
      yield errorEvent(new ReplyError('the stream ended before the reply began', 'truncated'));
      return;
    }
    for (const out of reader.finish()) yield out;
  } finally {
    // An early break, an error or [DONE]: let the connection go.
    if (ended || reader === null || !reader.done) body.cancel().catch(() => {});
  }
}

function errorEvent(error) {
  return { type: 'error', error };
}

function failure(error, message) {
  if (error?.name === 'AbortError')
    return new ReplyError('the request was aborted', 'aborted', { cause: error });
  const detail = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return new ReplyError(`${message} (${detail})`, 'truncated', { cause: error });
}

/** The message of an HTTP error answer: an OpenAI or Anthropic error body's, else the status and text. */
async function errorMessage(response) {
  let text = '';
  try {
    text = await response.text();
    const message = JSON.parse(text)?.error?.message;
    if (typeof message === 'string' && message !== '') return `${response.status}: ${message}`;
  } catch {
    // Not a JSON error body: the status and the start of whatever came.
  }
  return `${response.status} ${response.statusText}${text ? `: ${text.slice(0, 200)}` : ''}`.trim();
}
