// Types of `tokenrelay/sse` (sse.js).

/** The default bound on one line and on one event's field lines, in bytes. */
export declare const DEFAULT_MAX_EVENT_BYTES: number;

/** One dispatched event. `id` is the stream's last event id (sticky); `retry` is set by this event, else null. */
export interface ServerSentEvent {
  readonly type: string;
  readonly data: string;
  readonly id: string;
  readonly retry: number | null;
}

export interface SSEParserOptions {
  /** The bound on one line and on one event's field lines, in bytes (1 MiB). */
  maxEventBytes?: number;
  /** The last event id to start from (a reconnection's Last-Event-ID). */
  lastEventId?: string;
}

/** The stream broke the parser's size limit. */
export declare class SSEError extends Error {
  constructor(message: string, code: string);
  readonly code: string;
}

/** The WHATWG event-stream interpretation over bytes or strings, one decoder per stream. */
export declare class SSEParser {
  constructor(options?: SSEParserOptions);
  readonly lastEventId: string;
  readonly retry: number | null;
  /** After close(): whether the stream stopped inside an event. */
  readonly truncated: boolean;
  feed(chunk: Uint8Array | string): ServerSentEvent[];
  close(): ServerSentEvent[];
}

/** `response.body.pipeThrough(new SSEParserStream())`: a stream of events. */
export declare class SSEParserStream extends TransformStream<Uint8Array | string, ServerSentEvent> {
  constructor(options?: SSEParserOptions);
  readonly parser: SSEParser;
}
