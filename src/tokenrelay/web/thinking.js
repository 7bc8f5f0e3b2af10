// The "Thinking" section of a reply (issue 31): a reasoning model's reasoning, streamed apart from the answer,
// above it, never mixed into it. It is open while the model thinks, collapses when the answer starts (a click
// opens it again), and its summary says how long the thinking took and how many tokens it spent; a reply cut
// while thinking is marked cut. Text is written at most once per animation frame, as plain text (reasoning is
// not rendered as Markdown: it is the model's notes, and a half-written fence there must not restyle the page).

export class ThinkingSection {
  /**
   * @param {HTMLElement} body the answer's container: the section goes just before it
   * @param {{now?: () => number, frame?: (callback: () => void) => void}} [io]
   */
  constructor(body, io = {}) {
    const doc = body.ownerDocument;
    this.details = doc.createElement('details');
    this.details.className = 'thinking';
    this.details.open = true;
    this.summary = doc.createElement('summary');
    this.summary.textContent = 'Thinking…';
    this.text = doc.createElement('div');
    this.text.className = 'thinking-text';
    this.details.append(this.summary, this.text);
    body.before(this.details);
    this.now = io.now ?? (() => globalThis.performance.now());
    this.frame = io.frame ?? ((callback) => globalThis.requestAnimationFrame(callback));
    this.started = this.now();
    this.ended = null; // when the answer started (or the reply ended)
    this.pieces = 0; // reasoning deltas read
    this.pending = '';
    this.scheduled = false;
  }

  /** More reasoning text: shown in the next frame. */
  append(text) {
    this.pieces += 1;
    this.pending += text;
    if (!this.scheduled) {
      this.scheduled = true;
      this.frame(() => this.flush());
    }
  }

  flush() {
    this.scheduled = false;
    if (this.pending !== '') {
      this.text.append(this.pending); // a text node: never parsed as HTML
      this.pending = '';
    }
  }

  /** The answer began: the thinking is over, and folds away. */
  answerStarted() {
    if (this.ended !== null) return;
    this.ended = this.now();
    this.details.open = false;
    this.summary.textContent = this.label(null);
  }

  /** The reply ended: everything shown, the summary final (`reasoningTokens` from the usage, when sent). */
  finish({ finishReason, answered, reasoningTokens }) {
    this.flush();
    const cut = !answered && finishReason !== 'stop';
    if (this.ended === null) this.ended = this.now();
    if (cut) this.details.classList.add('cut');
    this.summary.textContent = this.label(reasoningTokens, cut ? (finishReason ?? 'stopped') : null);
  }

  label(tokens, cut = null) {
    const seconds = ((this.ended ?? this.now()) - this.started) / 1000;
    const count = tokens ?? this.pieces;
    const unit = tokens === null || tokens === undefined ? 'pieces' : 'tokens';
    const head = cut === null ? 'Thought' : `Thinking cut (${cut})`;
    return `${head} for ${seconds.toFixed(1)} s · ${count} ${unit}`;
  }
}
