// A consumer of every export of the npm package `tokenrelay`, for `tsc --noEmit` (make check, and the
// packed tarball's test in tests/e2e/package.test.js): the package's .d.ts files must describe what a
// TypeScript app writes against them. It is type-checked only, never run.

import {
  DEFAULT_MAX_EVENT_BYTES,
  SSEError,
  SSEParser,
  SSEParserStream,
  type ServerSentEvent,
} from 'tokenrelay/sse';
import {
  ChatCompletionsReader,
  MessagesReader,
  READERS,
  ResponsesReader,
  ReplyError,
  detectDialect,
  readReply,
  type DialectReader,
  type ReplyEvent,
} from 'tokenrelay/reply';
import {
  DEFAULT_MAX_DEPTH,
  JSONError,
  JSONSyntaxError,
  PartialJSON,
  TruncatedJSONError,
  UseAfterFinishError,
  joinEvents,
  type JSONEvent,
  type JSONValue,
} from 'tokenrelay/json';
import {
  ALLOWED_ATTRS,
  ALLOWED_STYLES,
  ALLOWED_TAGS,
  MAX_HIGHLIGHT,
  MarkdownRenderer,
  createShikiHighlighter,
  isSafeHref,
  type HighlightFunction,
  type ShikiApi,
} from 'tokenrelay/markdown';
import { SmoothTextStream, Smoother, smoothStream } from 'tokenrelay/smooth';
import { Markdown, useReply, type ReplyState } from 'tokenrelay/react';
import {
  LANES,
  ROWS,
  ROW_NAMES,
  RelayRecorder,
  alignSends,
  chatEvents,
  drawLanes,
  heldText,
  laneStats,
  stepStats,
  type LanesResult,
} from 'tokenrelay/lanes';

// tokenrelay/sse
const parser = new SSEParser({ maxEventBytes: DEFAULT_MAX_EVENT_BYTES, lastEventId: '' });
const events: ServerSentEvent[] = [
  ...parser.feed(new Uint8Array([100])),
  ...parser.feed('ata: x\n\n'),
  ...parser.close(),
];
const kinds: string[] = events.map((event) => `${event.type} ${event.data} ${event.id} ${event.retry ?? ''}`);
const failed: string | null = new SSEError('too large', 'sse_event_too_large').code;
const truncated: boolean = parser.truncated || parser.retry === null || parser.lastEventId === '';

export async function sse(response: Response): Promise<string[]> {
  const stream = response.body!.pipeThrough(new SSEParserStream());
  const out: string[] = [];
  for await (const event of stream) out.push(event.data);
  return out;
}

// tokenrelay/reply
export async function reply(): Promise<string> {
  let text = '';
  for await (const event of readReply(fetch('/v1/chat/completions', { method: 'POST' }), {
    dialect: 'chat-completions',
  })) {
    switch (event.type) {
      case 'text':
      case 'reasoning':
        text += event.text;
        break;
      case 'tool-call-start':
        text += `${event.index} ${event.id ?? ''} ${event.name}`;
        break;
      case 'tool-call-delta':
        text += event.arguments;
        break;
      case 'finish':
        text += `${event.reason} ${event.usage?.inputTokens ?? 0} ${event.usage?.outputTokens ?? 0}`;
        break;
      case 'error': {
        const error: ReplyError = event.error;
        text += `${error.code} ${error.status ?? ''} ${error.message}`;
        break;
      }
    }
  }
  return text;
}
const reader: DialectReader = new ChatCompletionsReader();
const fed: ReplyEvent[] = [
  ...reader.feed({ type: 'message', data: '{}', id: '', retry: null }),
  ...reader.finish(),
];
const dialectReaders: DialectReader[] = [new ResponsesReader(), new MessagesReader()];
const ping: ServerSentEvent = { type: 'ping', data: '{}', id: '', retry: null };
const ended: boolean = dialectReaders.every((r) => r.feed(ping).length === 0 && !r.done);
const dialect: string = detectDialect({ type: 'message', data: '', id: '', retry: null });
const readers = { ...READERS, custom: () => new ChatCompletionsReader() };
const replyError = new ReplyError('cut', 'truncated', { status: null });

// tokenrelay/json
const json = new PartialJSON({ maxDepth: DEFAULT_MAX_DEPTH });
const jsonEvents: JSONEvent[] = joinEvents(json.feed('{"a": [1, "b'));
const snapshot: JSONValue = json.value;
try {
  json.finish();
} catch (error) {
  if (error instanceof TruncatedJSONError) console.log(error.value, error.hasValue);
  else if (error instanceof JSONSyntaxError) console.log(error.offset, error.reason, error.events);
  else if (error instanceof UseAfterFinishError || error instanceof JSONError) throw error;
}

// tokenrelay/markdown
const own: HighlightFunction = (code, language) =>
  language === 'txt' ? [{ tag: 'span', attrs: { class: 'x' }, children: [code] }] : null;
const renderer = new MarkdownRenderer(document.createElement('div'), {
  highlighter: own,
  onWrite: () => {},
  skipOffscreen: true,
});
renderer.append('# Title\n\nSome **bold** text');
renderer.set(`${renderer.text} and more`);
renderer.setSmoother(new Smoother({ maxDelayMs: 100 }));
const rendered: Promise<void> = renderer.finish();
const safe: boolean =
  isSafeHref('https://example.com') &&
  ALLOWED_TAGS.has('a') &&
  ALLOWED_ATTRS.has('href') &&
  ALLOWED_STYLES.color.test('#24292e') &&
  MAX_HIGHLIGHT > 0;
const shikiLike: ShikiApi = {
  codeToTokens: (code) => ({ tokens: [[{ content: code, color: '#d73a49', fontStyle: 1 }]], fg: '#24292e' }),
  getLanguage: (name) => name,
  getLoadedThemes: () => ['github-light'],
};
const coloured: HighlightFunction = createShikiHighlighter(shikiLike, { theme: 'github-light' });

// tokenrelay/smooth
const smoother = new Smoother({ maxDelayMs: 200, locale: 'th' });
smoother.push('สวัสดี', 0);
const due: string = smoother.take(16) + smoother.finish() + String(smoother.pending);
const paced: ReadableStream<string> = new ReadableStream<string>().pipeThrough(new SmoothTextStream());
const transform = smoothStream({ maxDelayMs: 150 });
const parts: TransformStream<
  { type: 'text-delta'; id: string; text: string },
  { type: 'text-delta'; id: string; text: string }
> = transform();

// tokenrelay/react
export function Chat({ url }: { url: string }) {
  const reply = useReply({ dialect: 'chat-completions' });
  const state: ReplyState = reply;
  return (
    <div>
      <button onClick={() => reply.start((signal) => fetch(url, { method: 'POST', signal }))}>Ask</button>
      <button onClick={reply.stop}>Stop</button>
      <Markdown className="reply">{state.text}</Markdown>
      <p>
        {state.status} {state.finish?.reason} {state.error?.code}{' '}
        {state.toolCalls.map((call) => call.name).join()}
      </p>
    </div>
  );
}

// tokenrelay/lanes
const recorder = new RelayRecorder(() => performance.now());
recorder.handed({ arrive: null, parse: 1, timing: null });
recorder.painted();
const result: LanesResult = recorder.result();
const svg: SVGSVGElement = drawLanes(result, document);
const shift: number | null = alignSends(chatEvents(recorder.records));
const summary: string = `${heldText(laneStats(result.events))} ${stepStats(result.events)?.max_ms ?? ''} ${ROWS.join()} ${ROW_NAMES.step} ${LANES.length} ${recorder.waiting}`;

export const used = [
  kinds,
  failed,
  truncated,
  fed,
  ended,
  dialect,
  readers,
  replyError,
  jsonEvents,
  snapshot,
  rendered,
  coloured,
  safe,
  due,
  paced,
  parts,
  svg,
  shift,
  summary,
];
