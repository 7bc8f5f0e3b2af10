// `tokenrelay/react`: <Markdown>{text}</Markdown>, a drop-in for react-markdown or Streamdown in a chat UI
// (an AI SDK useChat app passes each message part's text), and useReply, a hook over tokenrelay/reply. React
// is an optional peer dependency: only this entry imports it.
//
// <Markdown> hands its text to one MarkdownRenderer per mounted element with set(): a text that extends the
// last one costs only the new part, drawn at the next animation frame; React never renders the Markdown's
// nodes itself (the element has no React children), so a re-render of the parent redraws nothing.

import { createElement, useCallback, useEffect, useLayoutEffect, useRef, useState } from 'react';
import { MarkdownRenderer } from './markdown.js';
import { readReply } from './reply.js';

/**
 * @param {{children?: string | null, highlighter?: any, className?: string, [attribute: string]: unknown}} props
 *   children: the Markdown text (the whole text so far); highlighter: highlight.js, or a function (see
 *   MarkdownRenderer); other props go to the <div>
 */
export function Markdown({ children, highlighter = null, ...props }) {
  const element = useRef(null);
  const renderer = useRef(null);
  useLayoutEffect(() => {
    renderer.current = new MarkdownRenderer(element.current, { highlighter });
    const container = element.current;
    return () => {
      renderer.current = null;
      container.replaceChildren();
    };
  }, [highlighter]);
  const text = typeof children === 'string' ? children : children == null ? '' : String(children);
  useLayoutEffect(() => {
    renderer.current.set(text);
  }, [text, highlighter]);
  return createElement('div', { ...props, ref: element });
}

const IDLE = Object.freeze({
  status: 'idle',
  text: '',
  reasoning: '',
  toolCalls: [],
  finish: null,
  error: null,
});

/**
 * A streamed reply as React state. `start(request)` reads one reply: `request` is a Response, a promise of
 * one, or a function given an AbortSignal that returns one (`(signal) => fetch(url, {..., signal})`);
 * `stop()` aborts it. State: status (`idle` → `streaming` → `finished` | `error`), text, reasoning, toolCalls
 * ({index, id, name, arguments} with the arguments joined so far), finish ({reason, usage}) and error (a
 * ReplyError). A new start() aborts the reply before it.
 * @param {{dialect?: string}} [options] passed to readReply
 */
export function useReply(options = {}) {
  const [state, setState] = useState(IDLE);
  const current = useRef(null);
  const dialect = options.dialect;
  useEffect(() => () => current.current?.abort(), []);
  const stop = useCallback(() => current.current?.abort(), []);
  const start = useCallback(
    async (request) => {
      current.current?.abort();
      const controller = new AbortController();
      current.current = controller;
      const live = { ...IDLE, status: 'streaming', toolCalls: [] };
      setState(live);
      const response = typeof request === 'function' ? request(controller.signal) : request;
      let next = live;
      for await (const event of readReply(response, { dialect })) {
        if (current.current !== controller) return; // a newer reply took over
        next = apply(next, event);
        setState(next);
      }
      if (current.current === controller) current.current = null;
      return next;
    },
    [dialect],
  );
  return { ...state, start, stop };
}

/** The state after one reply event (a new object: React compares by identity). */
function apply(state, event) {
  switch (event.type) {
    case 'text':
      return { ...state, text: state.text + event.text };
    case 'reasoning':
      return { ...state, reasoning: state.reasoning + event.text };
    case 'tool-call-start':
      return {
        ...state,
        toolCalls: [
          ...state.toolCalls,
          { index: event.index, id: event.id, name: event.name, arguments: '' },
        ],
      };
    case 'tool-call-delta':
      return {
        ...state,
        toolCalls: state.toolCalls.map((call) =>
          call.index === event.index ? { ...call, arguments: call.arguments + event.arguments } : call,
        ),
      };
    case 'finish':
      return { ...state, status: 'finished', finish: { reason: event.reason, usage: event.usage } };
    case 'error':
      return { ...state, status: 'error', error: event.error };
    default:
      return state;
  }
}
