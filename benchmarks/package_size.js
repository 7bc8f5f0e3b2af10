#!/usr/bin/env node
// The npm package's size per entry (issue 32 §3): each entry of `tokenrelay` bundled alone with esbuild,
// minified, as an app's bundler would include it, and gzipped (level 9). markdown-it and React are the
// app's own dependencies, so they are left out (external), then `tokenrelay/markdown` is shown with
// markdown-it too. Peers measured the same way: streaming-markdown, eventsource-parser and Streamdown.
//
//   node benchmarks/package_size.js

import { build } from 'esbuild';
import { gzipSync } from 'node:zlib';

const ENTRIES = [
  ['tokenrelay/sse', []],
  ['tokenrelay/reply', []],
  ['tokenrelay/json', []],
  ['tokenrelay/markdown', ['markdown-it']],
  ['tokenrelay/smooth', []],
  ['tokenrelay/react', ['react', 'markdown-it']],
  ['tokenrelay/lanes', []],
  ['tokenrelay/markdown', ['react'], 'with markdown-it'],
  ['streaming-markdown', []],
  ['eventsource-parser', []],
  ['eventsource-parser/stream', []],
  ['streamdown', ['react', 'react-dom', 'react/jsx-runtime']],
];

async function size(entry, external) {
  const result = await build({
    stdin: { contents: `export * from '${entry}';`, resolveDir: process.cwd(), loader: 'js' },
    bundle: true,
    minify: true,
    format: 'esm',
    write: false,
    external,
    loader: { '.css': 'empty' },
    logLevel: 'error',
  });
  const code = result.outputFiles[0].contents;
  return { min: code.length, gzip: gzipSync(code, { level: 9 }).length };
}

console.log('entry (minified, esbuild)                       min       gzip');
for (const [entry, external, note] of ENTRIES) {
  const { min, gzip } = await size(entry, external);
  const name = note
    ? `${entry} (${note})`
    : external.length
      ? `${entry} (without ${external.join(', ')})`
      : entry;
  console.log(
    `${name.padEnd(44)}${(min / 1000).toFixed(1).padStart(7)} kB${(gzip / 1000).toFixed(1).padStart(8)} kB`,
  );
}
