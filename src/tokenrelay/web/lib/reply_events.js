// The reply-event model of `tokenrelay/reply`: what every dialect's reader turns its stream into, so a UI
// handles one shape whichever API the server speaks (the Python side's model, in JS).
//
//   {type: 'text', text}                          answer text, in order
//   {type: 'reasoning', text}                     reasoning the server sends apart from the answer
//   {type: 'tool-call-start', index, id, name}    a tool call began (id may be null)
//   {type: 'tool-call-delta', index, arguments}   a fragment of that call's arguments (JSON text)
//   {type: 'finish', reason, usage}               the reply is whole: its finish reason (`stop`, `length`,
//                                                 `tool_calls`, `content_filter`…) and usage
//                                                 ({inputTokens, outputTokens}) or null when none was sent
//   {type: 'error', error}                        a ReplyError: the reply is not whole
//
// Every read ends with exactly one `finish` or one `error`, and nothing after it: a stream that stops
// without its finish is an `error` (code `truncated`), never a quiet end.

/** Why a reply is not whole. `code` says which way; `status` is the HTTP status of a refused request. */
export class ReplyError extends Error {
  /**
   * @param {string} message
   * @param {'http' | 'not-sse' | 'server' | 'protocol' | 'truncated' | 'aborted' | 'dialect'} code
   * @param {{status?: number | null, cause?: unknown}} [details]
   */
  constructor(message, code, { status = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'ReplyError';
    this.code = code;
    this.status = status;
  }
}

/**
 * @typedef {{type: 'text', text: string}
 *   | {type: 'reasoning', text: string}
 *   | {type: 'tool-call-start', index: number, id: string | null, name: string}
 *   | {type: 'tool-call-delta', index: number, arguments: string}
 *   | {type: 'finish', reason: string, usage: {inputTokens: number, outputTokens: number} | null}
 *   | {type: 'error', error: ReplyError}} ReplyEvent
 */

// What the dialects' readers share (not exported by the package: reply.js re-exports only ReplyError).

/** @param {unknown} value @returns {value is Record<string, any>} */
export const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value);
/** @param {unknown} value @returns {value is number} */
export const isCount = (value) => typeof value === 'number' && Number.isInteger(value);
/**
 * A JSON string may hold a lone surrogate escape ("\ud800"), which JSON.parse keeps: the app gets U+FFFD
 * in its place, as a decoder would have given for bad bytes (a lone surrogate is no text to show or send).
 * @param {string} text
 */
export const wellFormed = (text) => (text.isWellFormed() ? text : text.toWellFormed());

/** The one `error` event of a reply that is not whole. */
export const failed = (message, code) => ({ type: 'error', error: new ReplyError(message, code) });
