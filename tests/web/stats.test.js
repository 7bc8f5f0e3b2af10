// percentile (JS): the Python core's one definition, on the same vectors (tests/test_percentile.py).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readFileSync } from 'node:fs';
import { percentile } from '../../src/tokenrelay/web/lib/stats.js';

const VECTORS = JSON.parse(
  readFileSync(new URL('../vectors/percentile.json', import.meta.url), 'utf8'),
).vectors;

for (const { values, q, expected } of VECTORS) {
  test(`percentile of [${values}] at ${q}`, () => {
    const got = percentile(values, q);
    if (expected === null) assert.equal(got, null);
    else assert.ok(Math.abs(got - expected) < 1e-12, `${got} != ${expected}`);
  });
}

test('does not reorder its input', () => {
  const values = [3, 1, 2];
  percentile(values, 50);
  assert.deepEqual(values, [3, 1, 2]);
});
