// Types of `tokenrelay/smooth` (smoother.js).

export interface SmootherOptions {
  /** The most time any grapheme is held, in ms (200). */
  maxDelayMs?: number;
  /** The locale for grapheme segmentation. */
  locale?: string;
}

/** The jitter buffer, sans-I/O: the caller passes the clock. */
export declare class Smoother {
  constructor(options?: SmootherOptions);
  /** Graphemes held now. */
  readonly pending: number;
  push(text: string, now: number): void;
  take(now: number): string;
  finish(): string;
}

/** A TransformStream of strings, paced by graphemes. */
export declare class SmoothTextStream extends TransformStream<string, string> {
  constructor(options?: SmootherOptions);
}

/** A part of an AI SDK text stream; only text and reasoning deltas are paced. */
export type StreamPart =
  | { type: 'text-delta' | 'reasoning-delta'; id: string; text: string; providerMetadata?: unknown }
  | { type: string; [key: string]: unknown };

/** The AI SDK's `experimental_transform` shape. */
export declare function smoothStream(
  options?: SmootherOptions,
): <PART extends StreamPart>(options?: unknown) => TransformStream<PART, PART>;
