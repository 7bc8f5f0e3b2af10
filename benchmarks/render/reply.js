// A long, deterministic Markdown reply of the kind a chat model writes (headings, paragraphs with inline
// marks and links, lists, code fences, tables, quotes), cut into token-sized pieces.

const WORDS = (
  'the a of to and in is that for it as with on be this by are or from at an which model token stream ' +
  'render block frame parser browser server latency text reply chunk buffer cache value result request ' +
  'decode encode layout paint update close open line list table code quote example simple careful ' +
  'streaming markdown grapheme emoji unicode network socket engine prompt answer question detail'
).split(' ');

/** mulberry32: the same reply on every run. */
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

function sectionMaker(random) {
  const pick = (list) => list[Math.floor(random() * list.length)];
  const int = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));
  const words = (n) => Array.from({ length: n }, () => pick(WORDS)).join(' ');
  const sentence = () => {
    const parts = words(int(6, 16)).split(' ');
    const at = int(0, parts.length - 1);
    const mark = random();
    if (mark < 0.25) parts[at] = `**${parts[at]}**`;
    else if (mark < 0.45) parts[at] = `*${parts[at]}*`;
    else if (mark < 0.6) parts[at] = `\`${parts[at]}()\``;
    else if (mark < 0.7) parts[at] = `[${parts[at]}](https://example.com/${parts[at]})`;
    const s = parts.join(' ');
    return s[0].toUpperCase() + s.slice(1) + '.';
  };
  const paragraph = () => Array.from({ length: int(2, 5) }, sentence).join(' ');
  const blocks = [
    () => paragraph(),
    () => Array.from({ length: int(3, 7) }, () => `- ${sentence()}`).join('\n'),
    () => Array.from({ length: int(3, 6) }, (_, i) => `${i + 1}. ${sentence()}`).join('\n'),
    () => {
      const lines = Array.from(
        { length: int(4, 14) },
        () => `    ${pick(WORDS)} = ${pick(WORDS)}(${pick(WORDS)}, ${int(0, 99)})`,
      );
      return `\`\`\`python\ndef ${pick(WORDS)}_${pick(WORDS)}(${pick(WORDS)}):\n${lines.join('\n')}\n    return ${pick(WORDS)}\n\`\`\``;
    },
    () => {
      const rows = Array.from(
        { length: int(3, 8) },
        () => `| ${pick(WORDS)} | ${int(1, 999)} | ${words(3)} |`,
      );
      return `| Name | Count | Notes |\n|:-----|------:|-------|\n${rows.join('\n')}`;
    },
    () => `> ${sentence()}\n> ${sentence()}`,
  ];
  return () => {
    const out = [`## ${words(int(2, 5)).replace(/^./, (c) => c.toUpperCase())}`];
    for (let i = int(3, 6); i > 0; i--) out.push(pick(blocks)());
    return out.join('\n\n');
  };
}

/** Cut text into pieces about the size of BPE tokens (a leading space with a short word, digits, a mark). */
export function tokenize(text) {
  return text.match(/ ?[A-Za-z]{1,6}|[0-9]{1,3}|\n|[ \t]+|[^A-Za-z0-9\s]/g) ?? [];
}

/** The benchmark reply as `count` tokens. */
export function replyTokens(count = 10_000, seed = 7) {
  const random = seeded(seed);
  const section = sectionMaker(random);
  let text = '# A long answer\n\nHere is everything, section by section.';
  let tokens = tokenize(text);
  while (tokens.length < count) {
    text += `\n\n${section()}`;
    tokens = tokenize(text);
  }
  return tokens.slice(0, count);
}

/** A reply that opens a fenced code block of about `chars` characters and never closes it, as tokens. */
export function openCodeTokens(chars = 58_000, seed = 11) {
  const random = seeded(seed);
  const pick = (list) => list[Math.floor(random() * list.length)];
  let text = 'Here is the whole module:\n\n```python\n';
  const start = text.length;
  while (text.length - start < chars) {
    const indent = '    '.repeat(Math.floor(random() * 3));
    text += `${indent}${pick(WORDS)}_${pick(WORDS)} = ${pick(WORDS)}(${pick(WORDS)}, ${Math.floor(random() * 100)})  # ${pick(WORDS)}\n`;
  }
  return tokenize(text);
}
