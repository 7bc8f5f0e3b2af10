// Types of `tokenrelay/react` (react.js).

import type { HTMLAttributes, ReactElement } from 'react';
import type { HighlightFunction, HLJSApi } from './markdown.js';
import type { Dialect, ReplyError, Usage } from './reply.js';

export interface MarkdownProps extends Omit<HTMLAttributes<HTMLDivElement>, 'children'> {
  /** The Markdown text: the whole text so far. */
  children?: string | null;
  highlighter?: HLJSApi | HighlightFunction | null;
}

/** `<Markdown>{text}</Markdown>`: the text drawn by a MarkdownRenderer. */
export declare function Markdown(props: MarkdownProps): ReactElement;

export interface ToolCallState {
  index: number;
  id: string | null;
  name: string;
  arguments: string;
}

export interface ReplyState {
  status: 'idle' | 'streaming' | 'finished' | 'error';
  text: string;
  reasoning: string;
  toolCalls: ToolCallState[];
  finish: { reason: string; usage: Usage | null } | null;
  error: ReplyError | null;
}

export type ReplyRequest =
  Response | Promise<Response> | ((signal: AbortSignal) => Response | Promise<Response>);

/** A streamed reply as React state: start(request), stop(). */
export declare function useReply(options?: { dialect?: Dialect | (string & {}) }): ReplyState & {
  start(request: ReplyRequest): Promise<ReplyState | undefined>;
  stop(): void;
};
