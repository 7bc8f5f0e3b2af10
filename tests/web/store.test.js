// store.js: conversations and settings kept in (a stand-in for) localStorage, and the request they make.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  ConversationStore,
  DEFAULT_SETTINGS,
  loadSettings,
  requestBody,
  responseFormat,
  saveSettings,
  titleFor,
} from '../../src/tokenrelay/web/store.js';

/** localStorage's interface over a Map; `full` makes every write throw, as a full quota does. */
function memoryStorage() {
  const items = new Map();
  return {
    items,
    full: false,
    getItem: (key) => items.get(key) ?? null,
    setItem(key, value) {
      if (this.full) throw new DOMException('quota', 'QuotaExceededError');
      items.set(key, String(value));
    },
    removeItem: (key) => items.delete(key),
  };
}

function store(storage = memoryStorage()) {
  let clock = 1000;
  let ids = 0;
  return new ConversationStore(storage, { now: () => clock++, newId: () => `c${++ids}` });
}

describe('ConversationStore', () => {
  test('keeps conversations, newest first, and reads them back whole', () => {
    const storage = memoryStorage();
    const s = store(storage);
    const a = s.create();
    a.messages.push({ role: 'user', content: 'First question' });
    assert.ok(s.save(a));
    const b = s.create();
    b.messages.push({ role: 'user', content: 'Second' }, { role: 'assistant', content: 'Answer **bold**' });
    s.save(b);
    assert.deepEqual(
      s.list().map((c) => [c.id, c.title]),
      [
        ['c2', 'Second'],
        ['c1', 'First question'],
      ],
    );
    // A later save moves a conversation to the top; another store over the same storage sees it all.
    a.messages.push({ role: 'assistant', content: 'ok', outcome: { status: 'finished' } });
    s.save(a);
    const again = new ConversationStore(storage);
    assert.deepEqual(
      again.list().map((c) => c.id),
      ['c1', 'c2'],
    );
    assert.deepEqual(again.get('c1').messages, a.messages);
    assert.equal(again.get('nope'), null);
  });

  test('remove forgets the conversation and its messages', () => {
    const storage = memoryStorage();
    const s = store(storage);
    const a = s.create();
    a.messages.push({ role: 'user', content: 'x' });
    s.save(a);
    s.remove(a.id);
    assert.deepEqual(s.list(), []);
    assert.equal(s.get(a.id), null);
    assert.deepEqual([...storage.items.keys()], ['tokenrelay.index']);
  });

  test('a storage that refuses writes or holds garbage never throws', () => {
    const storage = memoryStorage();
    storage.items.set('tokenrelay.index', '{not json');
    const s = store(storage);
    assert.deepEqual(s.list(), []);
    storage.items.set('tokenrelay.index', JSON.stringify([{ id: 'x', title: 't', updated: 1 }, 5, null]));
    storage.items.set(
      'tokenrelay.chat.x',
      JSON.stringify([{ role: 'user', content: 'hi' }, { role: 'evil' }]),
    );
    assert.deepEqual(s.get('x').messages, [{ role: 'user', content: 'hi' }]);
    storage.full = true;
    const c = s.create();
    c.messages.push({ role: 'user', content: 'y' });
    assert.equal(s.save(c), false);
  });
});

describe('titleFor', () => {
  test('one line, cut at a word, never inside a surrogate pair', () => {
    assert.equal(titleFor('  Hello\n\nworld  '), 'Hello world');
    assert.equal(titleFor(''), 'New chat');
    const long = 'word '.repeat(30);
    const title = titleFor(long);
    assert.ok(title.endsWith('…') && title.length <= 61, title);
    assert.ok(!title.includes('wor…'), 'cut at a word');
    const emoji = '👩‍💻'.repeat(40);
    assert.doesNotMatch(titleFor(emoji), /[\uD800-\uDBFF](?![\uDC00-\uDFFF])/);
  });
});

describe('settings', () => {
  test('defaults, round trip, and values tidied on load', () => {
    const storage = memoryStorage();
    assert.deepEqual(loadSettings(storage), DEFAULT_SETTINGS);
    const settings = { ...DEFAULT_SETTINGS, model: 'm', temperature: 0.7, maxTokens: 64, apiKey: 'k' };
    saveSettings(storage, settings);
    assert.deepEqual(loadSettings(storage), settings);
    storage.items.set(
      'tokenrelay.settings',
      JSON.stringify({ temperature: '9', maxTokens: '12.6', smoothing: false, junk: 1 }),
    );
    const loaded = loadSettings(storage);
    assert.equal(loaded.temperature, 2);
    assert.equal(loaded.maxTokens, 13);
    assert.equal(loaded.smoothing, false);
    assert.equal('junk' in loaded, false);
  });

  test('requestBody: system prompt first, parameters only when set, failed replies left out', () => {
    const messages = [
      { role: 'user', content: 'a' },
      { role: 'assistant', content: '', outcome: { status: 'error' } },
      { role: 'user', content: 'b' },
      { role: 'assistant', content: 'c', outcome: { status: 'stopped' } },
    ];
    assert.deepEqual(requestBody({ ...DEFAULT_SETTINGS, model: 'm' }, messages), {
      model: 'm',
      messages: [
        { role: 'user', content: 'a' },
        { role: 'user', content: 'b' },
        { role: 'assistant', content: 'c' },
      ],
    });
    const set = { ...DEFAULT_SETTINGS, model: 'm', systemPrompt: 'Be brief.', temperature: 0, maxTokens: 5 };
    const body = requestBody(set, messages.slice(0, 1));
    assert.deepEqual(body, {
      model: 'm',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'a' },
      ],
      temperature: 0,
      max_tokens: 5,
    });
  });

  test('JSON: off by default; on asks for json_object, with a schema for json_schema; a bad schema is named', () => {
    assert.equal(DEFAULT_SETTINGS.json, false);
    const messages = [{ role: 'user', content: 'a' }];
    assert.equal(
      'response_format' in requestBody({ ...DEFAULT_SETTINGS, jsonSchema: '{}' }, messages),
      false,
    );
    const json = { ...DEFAULT_SETTINGS, json: true };
    assert.deepEqual(requestBody(json, messages).response_format, { type: 'json_object' });
    const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
    assert.deepEqual(requestBody({ ...json, jsonSchema: JSON.stringify(schema) }, messages).response_format, {
      type: 'json_schema',
      json_schema: { name: 'reply', schema, strict: true },
    });
    assert.match(responseFormat({ ...json, jsonSchema: '{"type": ' }).error, /not JSON/);
    assert.match(responseFormat({ ...json, jsonSchema: '[1]' }).error, /must be a JSON object/);
    const storage = memoryStorage();
    storage.items.set('tokenrelay.settings', JSON.stringify({ json: 'yes', jsonSchema: 5 }));
    assert.equal(loadSettings(storage).json, false); // only a real true turns it on
    assert.equal(loadSettings(storage).jsonSchema, '5');
  });
});
