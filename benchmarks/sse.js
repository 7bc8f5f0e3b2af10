#!/usr/bin/env node
// Server-sent events in JS, bytes to events, side by side in one run (issue 32 §3): tokenrelay's SSEParser
// (the npm package's `tokenrelay/sse`) against eventsource-parser 4, each as a stream
// (`body.pipeThrough(new SSEParserStream())` vs `TextDecoderStream` + eventsource-parser's
// `EventSourceParserStream`, what a fetch app writes) and as a plain loop over chunks (`parser.feed(bytes)` vs
// one `TextDecoder` + `createParser().feed(text)`). Two inputs:
//   - a chat reply of ~4.3 MB: chat.completion.chunk events whose text is the multilingual corpus (CJK,
//     Devanagari, emoji: multibyte characters cut by the chunking), in pieces of 1-64 bytes;
//   - one 512 KB `data:` line dripped in 64-byte pieces (a huge JSON value streamed by a proxy).
// Best of --repeat (5) wall times, rounds interleaved; every contestant must produce the same events.
//
//   node benchmarks/sse.js [--repeat 5]

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { createParser } from 'eventsource-parser';
import { EventSourceParserStream } from 'eventsource-parser/stream';
import { SSEParser, SSEParserStream } from 'tokenrelay/sse';

const { values: args } = parseArgs({ options: { repeat: { type: 'string', default: '5' } } });
const encoder = new TextEncoder();
const CORPUS = readFileSync(new URL('../tests/data/multilingual.txt', import.meta.url), 'utf8');

/** mulberry32: the same cuts every run. */
function seeded(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function chatReply(bytes) {
  const pieces = [];
  let size = 0;
  const points = Array.from(CORPUS);
  for (let i = 0; size < bytes; i++) {
    const text = points.slice((i * 3) % points.length, ((i * 3) % points.length) + 3).join('');
    const data = JSON.stringify({
      id: 'c',
      object: 'chat.completion.chunk',
      choices: [{ index: 0, delta: { content: text } }],
    });
    const event = `data: ${data}\n\n`;
    pieces.push(event);
    size += encoder.encode(event).length;
  }
  pieces.push('data: [DONE]\n\n');
  return encoder.encode(pieces.join(''));
}

function cut(bytes, random, max) {
  const out = [];
  for (let at = 0; at < bytes.length;) {
    const n = 1 + Math.floor(random() * max);
    out.push(bytes.slice(at, at + n));
    at += n;
  }
  return out;
}

function fixed(bytes, n) {
  const out = [];
  for (let at = 0; at < bytes.length; at += n) out.push(bytes.slice(at, at + n));
  return out;
}

const INPUTS = {
  'chat reply 4.3 MB, 1-64 B pieces': cut(chatReply(4.3e6), seeded(5), 64),
  '512 KB line, 64 B pieces': fixed(encoder.encode(`data: {"v": "${'x'.repeat(512 * 1024)}"}\n\n`), 64),
};

// One chunk per pull, as a network body gives them (enqueued all at once, Node's stream queue makes the run
// quadratic in the number of chunks).
const source = (chunks) => {
  let next = 0;
  return new ReadableStream({
    pull(controller) {
      if (next < chunks.length) controller.enqueue(chunks[next++]);
      else controller.close();
    },
  });
};

/** Each contestant: chunks → [count, bytes of data] (checked equal across contestants). */
const CONTESTANTS = {
  'tokenrelay SSEParserStream': async (chunks) => {
    let n = 0;
    let size = 0;
    for await (const event of source(chunks).pipeThrough(new SSEParserStream())) {
      n += 1;
      size += event.data.length;
    }
    return [n, size];
  },
  'eventsource-parser stream': async (chunks) => {
    let n = 0;
    let size = 0;
    const events = source(chunks)
      .pipeThrough(new TextDecoderStream())
      .pipeThrough(new EventSourceParserStream());
    for await (const event of events) {
      n += 1;
      size += event.data.length;
    }
    return [n, size];
  },
  'tokenrelay feed()': async (chunks) => {
    let n = 0;
    let size = 0;
    const parser = new SSEParser();
    for (const chunk of chunks) {
      for (const event of parser.feed(chunk)) {
        n += 1;
        size += event.data.length;
      }
    }
    parser.close();
    return [n, size];
  },
  'eventsource-parser feed()': async (chunks) => {
    let n = 0;
    let size = 0;
    const decoder = new TextDecoder();
    const parser = createParser({
      onEvent(event) {
        n += 1;
        size += event.data.length;
      },
    });
    for (const chunk of chunks) parser.feed(decoder.decode(chunk, { stream: true }));
    parser.feed(decoder.decode());
    return [n, size];
  },
};

async function main() {
  console.log(`SSE bytes → events in Node ${process.version}; best of ${args.repeat} runs, ms`);
  for (const [name, chunks] of Object.entries(INPUTS)) {
    const best = {};
    let expected = null;
    for (let round = 0; round < Number(args.repeat); round++) {
      for (const [contestant, fn] of Object.entries(CONTESTANTS)) {
        const start = performance.now();
        const result = await fn(chunks);
        const ms = performance.now() - start;
        expected ??= result;
        if (result[0] !== expected[0] || result[1] !== expected[1])
          throw new Error(`${contestant} read ${result} on ${name}, not ${expected}`);
        best[contestant] = Math.min(best[contestant] ?? Infinity, ms);
      }
    }
    console.log(`\n${name} (${chunks.length} pieces, ${expected[0]} events)`);
    for (const [contestant, ms] of Object.entries(best))
      console.log(`  ${contestant.padEnd(28)}${ms.toFixed(1).padStart(9)}`);
    const stream = best['eventsource-parser stream'] / best['tokenrelay SSEParserStream'];
    const loop = best['eventsource-parser feed()'] / best['tokenrelay feed()'];
    console.log(
      `  tokenrelay faster: ${stream.toFixed(2)}x as streams, ${loop.toFixed(2)}x as feed() loops (target >= 1.5x)`,
    );
  }
}

await main();
