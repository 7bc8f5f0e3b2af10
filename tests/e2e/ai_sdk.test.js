// The Vercel AI SDK (ai@6, @ai-sdk/openai-compatible, a zod schema) against `tokenrelay serve` on the embedded
// SmolLM2 model, whose replies response_format constrains: streamObject's partial objects, generateObject's
// object, and a reply cut by max_tokens (finish reason "length", no object). One server for the file.

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { PYTHON, ROOT, startModelServer } from './harness.js';

const MODEL = 'SmolLM2-135M-Instruct';
const PROMPT = 'Name a city in France and its country as JSON.';

function missing() {
  let reason = null;
  if (!existsSync(PYTHON)) reason = `${PYTHON} not found (run \`make install\`)`;
  else if (!existsSync(join(ROOT, 'node_modules', '@ai-sdk', 'openai-compatible'))) reason = 'run `npm ci`';
  if (reason !== null && (process.env.CI ?? 'false') !== 'false') throw new Error(`cannot run: ${reason}`);
  return reason;
}

const skip = missing() ?? false;
let server = null;
let ai = null;
let z = null;
const bodies = []; // every request body the SDK sent

/** The provider, with a fetch that records what the SDK puts on the wire. */
function provider() {
  return ai.createOpenAICompatible({
    name: 'tokenrelay',
    baseURL: `${server.url}/v1`,
    supportsStructuredOutputs: true, // send the schema (json_schema), not just json_object
    includeUsage: true,
    fetch: async (url, init) => {
      bodies.push(JSON.parse(init.body));
      return fetch(url, init);
    },
  })(MODEL);
}

const city = () => z.object({ name: z.string(), country: z.string() });

/** Whether `a` is a prefix of `b`: keys in the same order, strings grown, nothing else changed. */
function isPrefix(a, b) {
  if (typeof a === 'string' && typeof b === 'string') return b.startsWith(a);
  if (a && b && typeof a === 'object' && typeof b === 'object' && !Array.isArray(a)) {
    const keys = Object.keys(a);
    return keys.every((k, i) => Object.keys(b)[i] === k) && keys.every((k) => isPrefix(a[k], b[k]));
  }
  return a === b;
}

before(async () => {
  if (skip) return;
  const [sdk, compatible, zod] = await Promise.all([
    import('ai'),
    import('@ai-sdk/openai-compatible'),
    import('zod'),
  ]);
  ai = { ...sdk, createOpenAICompatible: compatible.createOpenAICompatible };
  z = zod.z;
  server = await startModelServer({ args: ['--threads', '2'] });
});

after(async () => {
  await server?.stop();
});

test('streamObject: partial objects that only grow, then the validated object', { skip }, async () => {
  const result = ai.streamObject({
    model: provider(),
    schema: city(),
    prompt: PROMPT,
    temperature: 0,
    maxOutputTokens: 40,
  });
  const partials = [];
  for await (const partial of result.partialObjectStream) partials.push(structuredClone(partial));
  const object = await result.object;
  assert.deepEqual(city().parse(object), object);
  assert.equal(await result.finishReason, 'stop');
  assert.ok(partials.length >= 3, JSON.stringify(partials));
  for (let i = 1; i < partials.length; i++) assert.ok(isPrefix(partials[i - 1], partials[i]));
  assert.deepEqual(partials.at(-1), object);
  const sent = bodies.at(-1);
  assert.equal(sent.stream, true);
  assert.equal(sent.response_format.type, 'json_schema');
  assert.deepEqual(Object.keys(sent.response_format.json_schema.schema.properties), ['name', 'country']);
});

test('generateObject: the object, validated by the zod schema', { skip }, async () => {
  const { object, finishReason, usage } = await ai.generateObject({
    model: provider(),
    schema: city(),
    prompt: PROMPT,
    temperature: 0,
    maxOutputTokens: 40,
  });
  assert.equal(finishReason, 'stop');
  assert.deepEqual(city().parse(object), object);
  assert.ok(usage.outputTokens > 0 && usage.outputTokens <= 40);
  assert.equal(bodies.at(-1).stream, undefined);
});

test('a reply cut by max_tokens gives no object, streamed or not', { skip }, async () => {
  const options = { model: provider(), schema: city(), prompt: PROMPT, temperature: 0, maxOutputTokens: 4 };
  await assert.rejects(ai.generateObject(options), (error) => {
    assert.ok(ai.NoObjectGeneratedError.isInstance(error), String(error));
    assert.equal(error.finishReason, 'length');
    return true;
  });
  const result = ai.streamObject(options);
  const partials = [];
  for await (const partial of result.partialObjectStream) partials.push(partial);
  await assert.rejects(result.object, (error) => ai.NoObjectGeneratedError.isInstance(error));
  assert.equal(await result.finishReason, 'length');
  assert.ok(!city().safeParse(partials.at(-1) ?? {}).success); // the last partial is not passed off as whole
});
