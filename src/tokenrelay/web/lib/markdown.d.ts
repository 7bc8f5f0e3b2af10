// Types of `tokenrelay/markdown` (markdown.js, view.js, code.js).

import type { Smoother } from './smooth.js';

/** A rendered node: text, or an element of the allowed tags. */
export type HighlightNode =
  string | { tag: string; attrs: Record<string, string> | null; children: HighlightNode[] };

/** A highlighter function: the code block's content as nodes (spans with classes), or null for plain text. */
export type HighlightFunction = (code: string, language: string) => HighlightNode[] | null;

/** What MarkdownRenderer uses of highlight.js (its default export). */
export interface HLJSApi {
  getLanguage(name: string): unknown;
  highlight(code: string, options: { language: string; ignoreIllegals?: boolean }): { value: string };
}

export interface MarkdownRendererOptions {
  /** highlight.js (never bundled: pass it in), or a highlighter function. */
  highlighter?: HLJSApi | HighlightFunction | null;
  /** Pace the text through a Smoother. */
  smoother?: Smoother | null;
  /** Runs right after each DOM write, in the same frame. */
  onWrite?: () => void;
  /** The frame scheduler (requestAnimationFrame). */
  requestFrame?: (callback: (now: number) => void) => unknown;
  /** The clock (performance.now). */
  now?: () => number;
  /** Full groups of blocks get `content-visibility: auto`, so the browser skips them off screen (true). */
  skipOffscreen?: boolean;
  /** Another markdown-it build (its default export). */
  markdownIt?: unknown;
}

/** Streamed Markdown in a container: one DOM write per frame, only the open block redrawn, safe by default. */
export declare class MarkdownRenderer {
  constructor(container: Element, options?: MarkdownRendererOptions);
  /** The text given so far. */
  readonly text: string;
  /** DOM writes so far. */
  readonly writes: number;
  append(text: string): void;
  /** The whole text so far: what extends the last text is appended; other text is drawn anew. */
  set(text: string): void;
  /** Turn smoothing on or off, keeping the text it held. */
  setSmoother(smoother: Smoother | null): void;
  /** The end: draws everything left; resolves once drawn. */
  finish(): Promise<void>;
}

/** The tags and attributes the renderer can write. */
export declare const ALLOWED_TAGS: ReadonlySet<string>;
export declare const ALLOWED_ATTRS: ReadonlySet<string>;
/** Whether an href may be written: http:, https:, mailto: or relative. */
export declare function isSafeHref(href: string): boolean;
/** The longest run of code lines highlighted at once; longer runs stay plain text. */
export declare const MAX_HIGHLIGHT: number;
