// A jitter buffer for streamed text (the smoothing setting). Tokens arrive in bursts; shown as they
// come, the reply stutters. The smoother holds text briefly and releases it at an even pace:
//
//   - each push is spread over the gap expected before the next one (a moving average of the gaps seen),
//     starting where the previous push's text ends, so a burst plays out evenly until more text comes;
//   - no grapheme is held for more than maxDelayMs after it arrived: the cap on added latency;
//   - only whole graphemes (Intl.Segmenter) are released. The last grapheme held may still grow (a combining
//     mark, a ZWJ and the next emoji, the second regional indicator of a flag can come in the next push),
//     so it waits for the next push, for finish(), or for its cap. Scripts without spaces (CJK, Thai) move a
//     grapheme at a time like any other, never waiting for a word to end.
//
// Sans-I/O: the caller passes the clock (`now`, in ms). Contract: the texts returned by take() and
// finish() joined equal the texts pushed joined, for any pushes and any take() times.

/** @typedef {{text: string, due: number, deadline: number}} Held */

// Weight of the newest gap in the moving average: a few pushes to follow a change of pace.
const GAP_WEIGHT = 0.3;

export class Smoother {
  /**
   * @param {{maxDelayMs?: number, locale?: string}} [options] maxDelayMs: the most time any grapheme is held
   */
  constructor({ maxDelayMs = 200, locale = undefined } = {}) {
    if (!(maxDelayMs > 0)) throw new RangeError('maxDelayMs must be positive');
    this._maxDelay = maxDelayMs;
    this._segmenter = new Intl.Segmenter(locale, { granularity: 'grapheme' });
    /** @type {Held[]} */
    this._held = [];
    this._first = 0; // index of the first grapheme still held (the queue is compacted lazily)
    this._lastArrival = null;
    this._gap = null; // moving average of the time between pushes
    this._lastDue = -Infinity; // when the latest grapheme scheduled is due
  }

  /** Graphemes held now. */
  get pending() {
    return this._held.length - this._first;
  }

  /** Text arrived at `now`. */
  push(text, now) {
    if (text === '') return;
    if (this._lastArrival !== null) {
      const gap = Math.min(now - this._lastArrival, this._maxDelay);
      this._gap = this._gap === null ? gap : this._gap + GAP_WEIGHT * (gap - this._gap);
    }
    this._lastArrival = now;
    // The held last grapheme and the new text are segmented together: the text may extend it.
    let deadline = now + this._maxDelay;
    let carried = null;
    if (this.pending > 0) {
      carried = this._held.pop();
      text = carried.text + text;
      deadline = carried.deadline;
    }
    const graphemes = Array.from(this._segmenter.segment(text), (s) => s.segment);
    const start = Math.max(now, this._lastDue);
    const spread = this._gap ?? 0;
    const n = graphemes.length;
    for (let k = 0; k < n; k++) {
      const due =
        k === 0 && carried ? carried.due : Math.min(start + (spread * (k + 1)) / n, now + this._maxDelay);
      this._held.push({ text: graphemes[k], due, deadline: k === 0 ? deadline : now + this._maxDelay });
    }
    this._lastDue = this._held[this._held.length - 1].due;
  }

  /** The text to show at `now`: every grapheme that is due, except a last one that may still grow. */
  take(now) {
    const held = this._held;
    let end = this._first;
    while (end < held.length && held[end].due <= now) end++;
    // The last grapheme held waits for the text after it, unless its cap has passed.
    if (end === held.length && end > this._first && held[end - 1].deadline > now) end--;
    return this._release(end);
  }

  /** End of the stream: everything held, at once. */
  finish() {
    return this._release(this._held.length);
  }

  _release(end) {
    if (end <= this._first) return '';
    let out = '';
    for (let i = this._first; i < end; i++) out += this._held[i].text;
    this._first = end;
    if (this._first > 64 && this._first * 2 > this._held.length) {
      this._held = this._held.slice(this._first);
      this._first = 0;
    }
    return out;
  }
}
