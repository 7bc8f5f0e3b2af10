// The settings dialog: model (from /v1/models), system prompt, temperature, max tokens, smoothing, a JSON
// reply with an optional schema, the tools offered to the model, and the API key when the server asks for one. Every change is kept at once
// (store.js); nothing to "save".

import { normalize, responseFormat, saveSettings, toolsOf } from './store.js';

/** Fields of the dialog: element id → setting name. */
const FIELDS = {
  model: 'model',
  'system-prompt': 'systemPrompt',
  temperature: 'temperature',
  'max-tokens': 'maxTokens',
  smoothing: 'smoothing',
  json: 'json',
  'json-schema': 'jsonSchema',
  tools: 'tools',
  'api-key': 'apiKey',
};

export class SettingsPanel {
  /**
   * @param {Document} doc
   * @param {Storage} storage
   * @param {import('./store.js').Settings} settings kept up to date in place
   * @param {(name: string) => void} onChange called after a setting changed
   */
  constructor(doc, storage, settings, onChange) {
    this._doc = doc;
    this._storage = storage;
    this.settings = settings;
    this._dialog = doc.getElementById('settings');
    this._keyRow = doc.getElementById('api-key-row');
    this._note = doc.getElementById('settings-note');
    this._opener = null;
    for (const [id, name] of Object.entries(FIELDS)) {
      const field = doc.getElementById(id);
      if (field.type === 'checkbox') field.checked = settings[name];
      else if (id !== 'model') field.value = settings[name] ?? '';
      field.addEventListener(field.type === 'checkbox' || id === 'model' ? 'change' : 'input', () => {
        const raw = field.type === 'checkbox' ? field.checked : field.value;
        settings[name] = normalize(name, raw);
        saveSettings(storage, settings);
        if (name === 'json' || name === 'jsonSchema') this._showSchema();
        if (name === 'tools') this._toolsNote.textContent = toolsOf(settings).error ?? '';
        onChange(name);
      });
    }
    this._schemaRow = doc.getElementById('json-schema-row');
    this._schemaNote = doc.getElementById('json-schema-note');
    this._showSchema();
    this._toolsNote = doc.getElementById('tools-note');
    this._toolsNote.textContent = toolsOf(settings).error ?? '';
    if (settings.apiKey !== '') this._keyRow.hidden = false;
    doc.getElementById('close-settings').addEventListener('click', () => this.close());
    this._dialog.addEventListener('close', () => {
      this._note.textContent = '';
      this._opener?.focus();
    });
  }

  open(focusId = 'model') {
    this._opener = this._doc.activeElement;
    if (!this._dialog.open) this._dialog.showModal();
    this._doc.getElementById(focusId).focus();
  }

  close() {
    this._dialog.close();
  }

  /** The schema field shows with JSON on, and says at once when what is typed there is not a schema. */
  _showSchema() {
    this._schemaRow.hidden = !this.settings.json;
    this._schemaNote.textContent = responseFormat(this.settings).error ?? '';
  }

  /** The server answered 401: show the key field, say why, and put the cursor in it. */
  requireKey(message) {
    this._keyRow.hidden = false;
    this._note.textContent = message;
    this.open('api-key');
  }

  /** Fill the model list; keep the chosen model if the server serves it, else take the first. */
  setModels(ids) {
    const select = this._doc.getElementById('model');
    select.replaceChildren(
      ...ids.map((id) => {
        const option = this._doc.createElement('option');
        option.value = id;
        option.textContent = id;
        return option;
      }),
    );
    if (!ids.includes(this.settings.model) && ids.length > 0) {
      this.settings.model = ids[0];
      saveSettings(this._storage, this.settings);
    }
    select.value = this.settings.model;
  }
}
