// Types of `tokenrelay/markdown` (markdown.js, view.js, code.js).

import type { Smoother } from './smooth.js';

/** A rendered node: text, or an element of the allowed tags (`style`: properties of ALLOWED_STYLES). */
export type HighlightNode =
  | string
  | {
      tag: string;
      attrs: Record<string, string> | null;
      children: HighlightNode[];
      style?: Record<string, string>;
    };

/** A highlighter function: the code block's content as nodes (spans with classes), or null for plain text. */
export type HighlightFunction = (code: string, language: string) => HighlightNode[] | null;

/** What MarkdownRenderer uses of highlight.js (its default export). */
export interface HLJSApi {
  getLanguage(name: string): unknown;
  highlight(code: string, options: { language: string; ignoreIllegals?: boolean }): { value: string };
}

/** What createShikiHighlighter uses of a Shiki highlighter (`createHighlighter()` / `createHighlighterCore()`). */
export interface ShikiApi {
  codeToTokens(
    code: string,
    options: { lang: string; theme: string; grammarState?: unknown },
  ): {
    tokens: { content: string; color?: string; fontStyle?: number }[][];
    fg?: string;
    grammarState?: unknown;
  };
  getLanguage(name: string): unknown;
  getLoadedThemes(): string[];
}

/**
 * Shiki as the renderer's highlighter (never bundled: pass in the highlighter you created). Complete lines
 * once each, each run going on from the grammar state the last one ended in; colours set through CSSOM.
 */
export declare function createShikiHighlighter(
  shiki: ShikiApi,
  options?: { theme?: string },
): HighlightFunction;

export interface MarkdownRendererOptions {
  /** highlight.js (never bundled: pass it in), or a highlighter function (e.g. createShikiHighlighter's). */
  highlighter?: HLJSApi | HighlightFunction | null;
  /** Pace the text through a Smoother. */
  smoother?: Smoother | null;
  /** Runs right after each DOM write, in the same frame. */
  onWrite?: () => void;
  /** The frame scheduler (requestAnimationFrame). */
  requestFrame?: (callback: (now: number) => void) => unknown;
  /** The clock (performance.now). */
  now?: () => number;
  /** Groups of blocks get `content-visibility: auto`, so the browser skips them off screen (true). */
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
/** The styles a highlighter's nodes may carry (set through CSSOM), each with the values it accepts. */
export declare const ALLOWED_STYLES: Readonly<Record<string, RegExp>>;
/** Whether an href may be written: http:, https:, mailto: or relative. */
export declare function isSafeHref(href: string): boolean;
/** The longest run of code lines highlighted at once; longer runs stay plain text. */
export declare const MAX_HIGHLIGHT: number;
