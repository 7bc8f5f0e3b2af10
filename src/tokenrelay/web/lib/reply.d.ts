// Types of `tokenrelay/reply` (reply.js, reply_events.js, reply_chat.js, reply_responses.js, reply_messages.js).

import type { ServerSentEvent } from './sse.js';

export interface Usage {
  inputTokens: number;
  outputTokens: number;
}

export type ReplyEvent =
  | { type: 'text'; text: string }
  | { type: 'reasoning'; text: string }
  | { type: 'tool-call-start'; index: number; id: string | null; name: string }
  | { type: 'tool-call-delta'; index: number; arguments: string }
  | { type: 'finish'; reason: string; usage: Usage | null }
  | { type: 'error'; error: ReplyError };

export type ReplyErrorCode = 'http' | 'not-sse' | 'server' | 'protocol' | 'truncated' | 'aborted' | 'dialect';

/** Why a reply is not whole. */
export declare class ReplyError extends Error {
  constructor(message: string, code: ReplyErrorCode, details?: { status?: number | null; cause?: unknown });
  readonly code: ReplyErrorCode;
  /** The HTTP status of a refused request, else null. */
  readonly status: number | null;
}

/** One dialect's sans-I/O reader: feed() each SSE event, finish() at the end of the stream. */
export interface DialectReader {
  feed(event: ServerSentEvent): ReplyEvent[];
  finish(): ReplyEvent[];
  /** Nothing more needs reading. */
  readonly done: boolean;
}

export type Dialect = 'chat-completions' | 'responses' | 'messages';

/** The readers by dialect. */
export declare const READERS: Readonly<Record<string, () => DialectReader>>;

/** The dialect a stream speaks, from its first event. */
export declare function detectDialect(event: ServerSentEvent): Dialect;

export interface ReadReplyOptions {
  /** The dialect; by default told by the first event. */
  dialect?: Dialect | (string & {});
  /** Readers to use instead of READERS (to add a dialect). */
  readers?: Readonly<Record<string, () => DialectReader>>;
  maxEventBytes?: number;
}

/** The reply events of a streamed response, ending with one `finish` or one `error`; never throws. */
export declare function readReply(
  response: Response | Promise<Response>,
  options?: ReadReplyOptions,
): AsyncGenerator<ReplyEvent, void, undefined>;

/** The Chat Completions reader. */
export declare class ChatCompletionsReader implements DialectReader {
  constructor();
  feed(event: { data: string }): ReplyEvent[];
  finish(): ReplyEvent[];
  readonly done: boolean;
}

/** The OpenAI Responses API reader (`event: response.*`). */
export declare class ResponsesReader implements DialectReader {
  constructor();
  feed(event: { type: string; data: string }): ReplyEvent[];
  finish(): ReplyEvent[];
  readonly done: boolean;
}

/** The Anthropic Messages API reader (`event: message_start` … `message_stop`). */
export declare class MessagesReader implements DialectReader {
  constructor();
  feed(event: { type: string; data: string }): ReplyEvent[];
  finish(): ReplyEvent[];
  readonly done: boolean;
}
