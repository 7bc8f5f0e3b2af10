// What the page keeps in the browser (issue 14): the conversations and the settings, in localStorage. No
// DOM here: the storage comes in as an argument (window.localStorage in the page, a Map-backed stand-in
// under node), so the tests run it as the page does.
//
// Layout: `tokenrelay.index` lists the conversations ({id, title, updated}, newest first); each one's
// messages are under `tokenrelay.chat.<id>`; the settings under `tokenrelay.settings`. A storage that
// refuses a write (quota, private mode) loses that write, never the page: the conversation stays on screen.

const PREFIX = 'tokenrelay.';
const INDEX = `${PREFIX}index`;
const SETTINGS = `${PREFIX}settings`;
const TITLE_LENGTH = 60;

/**
 * @typedef {{
 *   role: 'user' | 'assistant' | 'tool', content: string, outcome?: object, format?: 'json',
 *   tool_calls?: {id: string, type: 'function', function: {name: string, arguments: string}}[],
 *   tool_call_id?: string,
 * }} Message an assistant turn may hold the calls it made (tool_calls); a tool turn is the result the user
 *   gave for one of them (tool_call_id): the page runs no tool itself.
 *   outcome: what the page showed under an assistant reply (status, error, timings), to show it again;
 *   format: 'json' for a reply asked for as JSON, drawn again as a tree.
 * @typedef {{id: string, title: string, updated: number, messages: Message[]}} Conversation
 * @typedef {{id: string, title: string, updated: number}} Summary
 * @typedef {{
 *   model: string, systemPrompt: string, temperature: number | null, maxTokens: number | null,
 *   smoothing: boolean, apiKey: string, json: boolean, jsonSchema: string, tools: string,
 * }} Settings
 *   json: ask for a JSON reply (response_format), drawn as a tree; jsonSchema: an optional JSON Schema for it;
 *   tools: the tools offered to the model, a JSON array of OpenAI function tools (empty: none).
 */

/** @type {Settings} */
export const DEFAULT_SETTINGS = Object.freeze({
  model: '',
  systemPrompt: '',
  temperature: null,
  maxTokens: null,
  smoothing: true,
  apiKey: '',
  json: false,
  jsonSchema: '',
  tools: '',
});

/** A conversation's title: its first message, on one line, cut at a word near TITLE_LENGTH characters. */
export function titleFor(text) {
  const line = text.replace(/\s+/g, ' ').trim();
  if (line.length <= TITLE_LENGTH) return line || 'New chat';
  const cut = line.lastIndexOf(' ', TITLE_LENGTH);
  // Array.from: never cut a surrogate pair in two.
  const head = cut > TITLE_LENGTH / 2 ? line.slice(0, cut) : Array.from(line).slice(0, TITLE_LENGTH).join('');
  return `${head}…`;
}

export class ConversationStore {
  /**
   * @param {Pick<Storage, 'getItem' | 'setItem' | 'removeItem'>} storage
   * @param {{now?: () => number, newId?: () => string}} io
   */
  constructor(storage, { now = () => Date.now(), newId = randomId } = {}) {
    this._storage = storage;
    this._now = now;
    this._newId = newId;
  }

  /** @returns {Summary[]} newest first */
  list() {
    const index = read(this._storage, INDEX);
    return Array.isArray(index) ? index.filter(isSummary) : [];
  }

  /** @returns {Conversation | null} */
  get(id) {
    const summary = this.list().find((entry) => entry.id === id);
    const messages = read(this._storage, PREFIX + 'chat.' + id);
    if (!summary || !Array.isArray(messages)) return null;
    return { ...summary, messages: messages.filter(isMessage) };
  }

  /** A new, empty conversation (kept only once save() is called with a message in it). */
  create() {
    return { id: this._newId(), title: 'New chat', updated: this._now(), messages: [] };
  }

  /**
   * Keep `conversation` (its title from its first message); it moves to the top of the list.
   * @param {Conversation} conversation
   * @returns {boolean} whether the storage took it
   */
  save(conversation) {
    const first = conversation.messages.find((m) => m.role === 'user');
    conversation.title = titleFor(first?.content ?? '');
    conversation.updated = this._now();
    const { id, title, updated } = conversation;
    const index = [{ id, title, updated }, ...this.list().filter((entry) => entry.id !== id)];
    return (
      write(this._storage, PREFIX + 'chat.' + id, conversation.messages) && write(this._storage, INDEX, index)
    );
  }

  /** Forget a conversation. */
  remove(id) {
    write(
      this._storage,
      INDEX,
      this.list().filter((entry) => entry.id !== id),
    );
    try {
      this._storage.removeItem(PREFIX + 'chat.' + id);
    } catch {
      // A storage that cannot remove cannot have kept much either.
    }
  }
}

/** @returns {Settings} */
export function loadSettings(storage) {
  const saved = read(storage, SETTINGS);
  const settings = { ...DEFAULT_SETTINGS };
  if (saved && typeof saved === 'object') {
    for (const key of Object.keys(DEFAULT_SETTINGS)) {
      if (key in saved) settings[key] = normalize(key, saved[key]);
    }
  }
  return settings;
}

/** @param {Settings} settings */
export function saveSettings(storage, settings) {
  return write(storage, SETTINGS, settings);
}

/** A setting's value as the page uses it; what a form field or an old page version left is tidied. */
export function normalize(key, value) {
  if (key === 'temperature' || key === 'maxTokens') {
    if (value === null || value === '' || value === undefined) return null;
    const number = Number(value);
    if (!Number.isFinite(number)) return null;
    return key === 'maxTokens' ? Math.max(1, Math.round(number)) : Math.min(2, Math.max(0, number));
  }
  if (key === 'smoothing') return value !== false;
  if (key === 'json') return value === true;
  return typeof value === 'string' ? value : String(value ?? '');
}

/**
 * The body of a chat request for `messages` under `settings`: the system prompt first, when there is one;
 * temperature and max_tokens only when set (otherwise the server's defaults apply).
 * @param {Settings} settings
 * @param {Message[]} messages
 */
export function requestBody(settings, messages) {
  const body = { model: settings.model, messages: [] };
  if (settings.systemPrompt.trim() !== '') {
    body.messages.push({ role: 'system', content: settings.systemPrompt });
  }
  // A reply that failed before any text (an error, a refused request) is shown but is not history.
  for (const { role, content, tool_calls: calls, tool_call_id: answers } of messages) {
    if (role === 'tool') body.messages.push({ role, tool_call_id: answers, content });
    else if (calls?.length) body.messages.push({ role, content: content || null, tool_calls: calls });
    else if (role === 'user' || content !== '') body.messages.push({ role, content });
  }
  if (settings.temperature !== null) body.temperature = settings.temperature;
  if (settings.maxTokens !== null) body.max_tokens = settings.maxTokens;
  const format = responseFormat(settings);
  if (format.responseFormat !== undefined) body.response_format = format.responseFormat;
  const offered = toolsOf(settings);
  if (offered.tools !== undefined && format.responseFormat === undefined) body.tools = offered.tools;
  return body;
}

/**
 * The tools the page offers the model under `settings`: none when the field is empty; otherwise it must be a
 * JSON array of function tools (`{"type": "function", "function": {"name": ...}}`), else an `error` the
 * settings show (the server would refuse the request; with JSON replies on, tools are not sent).
 * @returns {{tools?: object[], error?: string}}
 */
export function toolsOf(settings) {
  if (settings.tools.trim() === '') return {};
  let tools;
  try {
    tools = JSON.parse(settings.tools);
  } catch (error) {
    return { error: `the tools are not JSON (${error.message})` };
  }
  const isTool = (t) => t !== null && typeof t === 'object' && typeof t.function?.name === 'string';
  if (!Array.isArray(tools) || !tools.every(isTool))
    return { error: 'the tools must be a JSON array of {"type": "function", "function": {"name", ...}}' };
  return { tools };
}

/**
 * The request's response_format under `settings`: none with JSON off; `json_object` with JSON on and no
 * schema; `json_schema` (strict) with the schema given. A schema that is not a JSON object is an `error`
 * (the page says so instead of sending a request the server would refuse).
 * @returns {{responseFormat?: object, error?: string}}
 */
export function responseFormat(settings) {
  if (!settings.json) return {};
  if (settings.jsonSchema.trim() === '') return { responseFormat: { type: 'json_object' } };
  let schema;
  try {
    schema = JSON.parse(settings.jsonSchema);
  } catch (error) {
    return { error: `the JSON schema is not JSON (${error.message})` };
  }
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema))
    return { error: 'the JSON schema must be a JSON object' };
  return { responseFormat: { type: 'json_schema', json_schema: { name: 'reply', schema, strict: true } } };
}

function read(storage, key) {
  try {
    const text = storage.getItem(key);
    return text === null ? null : JSON.parse(text);
  } catch {
    return null;
  }
}

function write(storage, key, value) {
  try {
    storage.setItem(key, JSON.stringify(value));
    return true;
  } catch {
    return false;
  }
}

function isSummary(entry) {
  return entry !== null && typeof entry === 'object' && typeof entry.id === 'string';
}

function isMessage(entry) {
  return (
    entry !== null &&
    typeof entry === 'object' &&
    (entry.role === 'user' || entry.role === 'assistant' || entry.role === 'tool') &&
    typeof entry.content === 'string' &&
    (entry.role !== 'tool' || typeof entry.tool_call_id === 'string') &&
    (entry.tool_calls === undefined || Array.isArray(entry.tool_calls))
  );
}

function randomId() {
  // getRandomValues, not randomUUID: the page may be served over plain HTTP on a LAN address, which is not
  // a secure context, and randomUUID exists only in one.
  const bytes = globalThis.crypto.getRandomValues(new Uint8Array(12));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}
