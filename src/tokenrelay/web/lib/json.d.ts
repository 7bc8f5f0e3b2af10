// Types of `tokenrelay/json` (partial_json.js).

export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };
export type JSONPath = (string | number)[];
export type JSONKind = 'object' | 'array' | 'string' | 'number' | 'boolean' | 'null';

export type JSONEvent =
  | { type: 'started'; path: JSONPath; kind: JSONKind }
  | { type: 'grew'; path: JSONPath; text: string }
  | { type: 'completed'; path: JSONPath; value: JSONValue };

export declare const DEFAULT_MAX_DEPTH: number;

/** Text that must be one JSON value is not. */
export declare class JSONError extends SyntaxError {}

/** The text cannot be continued into valid JSON; `offset` is where (UTF-16 code units). */
export declare class JSONSyntaxError extends JSONError {
  constructor(reason: string, offset: number, events?: JSONEvent[]);
  readonly reason: string;
  readonly offset: number;
  /** The events of the piece up to the error. */
  readonly events: JSONEvent[];
}

/** The text ended before its value did; `value` is the snapshot. */
export declare class TruncatedJSONError extends JSONError {
  constructor(message: string, value: JSONValue, hasValue: boolean);
  readonly value: JSONValue;
  readonly hasValue: boolean;
}

/** feed() after finish(). */
export declare class UseAfterFinishError extends Error {
  constructor(message: string);
}

/** `events` with adjacent growth of one string merged. */
export declare function joinEvents(events: JSONEvent[]): JSONEvent[];

/** A JSON text read as it streams: a live snapshot that only grows, and events. */
export declare class PartialJSON {
  constructor(options?: { maxDepth?: number });
  /** The live snapshot (null until a value has started). */
  readonly value: JSONValue;
  readonly hasValue: boolean;
  feed(text: string): JSONEvent[];
  /** The final value; throws TruncatedJSONError or JSONSyntaxError. */
  finish(): JSONValue;
}
