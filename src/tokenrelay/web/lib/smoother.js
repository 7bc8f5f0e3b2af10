// A jitter buffer for streamed text (the `tokenrelay/smooth` entry; the page's smoothing setting). Tokens arrive in bursts; shown as they
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
// Smoother is sans-I/O: the caller passes the clock (`now`, in ms). Contract: the texts returned by take()
// and finish() joined equal the texts pushed joined, for any pushes and any take() times. Around it, with a
// clock and a timer: SmoothTextStream, a TransformStream of strings, and smoothStream(), the same pacing in
// the shape of the AI SDK's `experimental_transform` (its `smoothStream` cuts at words, which holds back
// whole sentences of CJK or Thai, and releases a chunk per fixed delay, whatever the model's pace).

/** @typedef {{text: string, due: number, deadline: number}} Held */

/**
 * The graphemes of `text`. Intl.Segmenter is asked a window at a time: over one long string V8's segment
 * iterator costs time in the string's length for each grapheme (a 160 KB push took 108 s), over windows
 * the work is linear. A window's last grapheme may go on past it, so it starts the next window.
 */
function segment(segmenter, text) {
  const out = [];
  let window = 256;
  for (let start = 0; start < text.length;) {
    let end = Math.min(text.length, start + window);
    const code = text.charCodeAt(end - 1);
    if (end < text.length && code >= 0xd800 && code <= 0xdbff) end += 1; // never half a pair
    const pieces = Array.from(segmenter.segment(text.slice(start, end)), (s) => s.segment);
    if (end < text.length) pieces.pop();
    if (pieces.length === 0) {
      window *= 2; // one grapheme longer than the window (a long run of combining marks)
      continue;
    }
    for (const piece of pieces) {
      out.push(piece);
      start += piece.length;
    }
  }
  return out;
}

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
    const graphemes = segment(this._segmenter, text);
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

/** How often a paced stream looks for text that has come due (about one frame). */
const TICK_MS = 16;

/**
 * Pacing over a Smoother with a real clock: `push(text)` holds text, `onText(text)` gets it as it comes due,
 * checked every TICK_MS while anything is held; `drain()` resolves once everything pushed has been handed
 * on (at its due time: a stream's end does not skip the pacing, which the cap bounds).
 */
class Pacer {
  constructor(options, onText) {
    this._smoother = new Smoother(options);
    this._onText = onText;
    this._now = options?.now ?? (() => globalThis.performance.now());
    this._timer = null;
    this._drained = null;
  }

  push(text) {
    this._smoother.push(text, this._now());
    this._arm();
  }

  /** Everything held, now. */
  flush() {
    const text = this._smoother.finish();
    if (text !== '') this._onText(text);
  }

  drain() {
    if (this._smoother.pending === 0) return Promise.resolve();
    return new Promise((resolve) => {
      this._drained = resolve;
      this._arm();
    });
  }

  _arm() {
    if (this._timer === null) this._timer = setTimeout(() => this._tick(), TICK_MS);
  }

  _tick() {
    this._timer = null;
    const text = this._smoother.take(this._now());
    if (text !== '') this._onText(text);
    if (this._drained !== null && this._smoother.pending === 1) {
      // The last grapheme waits for text that will not come now: past its due time, release it.
      const now = this._now();
      this._onText(this._smoother.take(now + 1e9));
    }
    if (this._smoother.pending > 0) this._arm();
    else if (this._drained !== null) {
      const resolve = this._drained;
      this._drained = null;
      resolve();
    }
  }
}

/**
 * A TransformStream of strings that paces its text: `stream.pipeThrough(new SmoothTextStream())`. Text comes
 * out in whole graphemes at the pace it went in, each held at most maxDelayMs; nothing is lost.
 */
export class SmoothTextStream extends TransformStream {
  /** @param {{maxDelayMs?: number, locale?: string}} [options] as for Smoother */
  constructor(options) {
    let pacer = null;
    super({
      start(controller) {
        pacer = new Pacer(options, (text) => controller.enqueue(text));
      },
      transform(chunk) {
        if (typeof chunk !== 'string') throw new TypeError('SmoothTextStream takes strings');
        if (chunk !== '') pacer.push(chunk);
      },
      flush() {
        return pacer.drain();
      },
    });
  }
}

/**
 * The Smoother in the shape of the AI SDK's `experimental_transform`:
 * `streamText({..., experimental_transform: smoothStream()})`. Text and reasoning deltas (`text-delta`,
 * `reasoning-delta`, with `id` and `text`) are paced by graphemes; any other part first releases all the
 * text held before it, then passes unchanged, so the order of parts is kept.
 * @param {{maxDelayMs?: number, locale?: string}} [options] as for Smoother
 * @returns {() => TransformStream<any, any>}
 */
export function smoothStream(options) {
  new Smoother(options); // the options are checked here, not at the first reply
  return () => {
    let pacer = null;
    let current = null; // the {type, id} the held text belongs to
    let out = null;
    const emit = (text) => out.enqueue({ type: current.type, id: current.id, text });
    return new TransformStream({
      start(controller) {
        out = controller;
      },
      async transform(part, controller) {
        const paced = part?.type === 'text-delta' || part?.type === 'reasoning-delta';
        if (paced && typeof part.text === 'string' && part.providerMetadata == null) {
          if (current !== null && (current.type !== part.type || current.id !== part.id)) pacer.flush();
          if (current === null || current.type !== part.type || current.id !== part.id) {
            current = { type: part.type, id: part.id };
            pacer = new Pacer(options, emit);
          }
          if (part.text !== '') pacer.push(part.text);
          return;
        }
        pacer?.flush();
        controller.enqueue(part);
      },
      flush() {
        return pacer?.drain();
      },
    });
  };
}
