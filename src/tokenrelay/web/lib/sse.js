// Server-sent events (the `tokenrelay/sse` entry; the page reads its streams with it too): the WHATWG
// "event stream interpretation", rule by rule, mirroring the Python SSEParser in src/tokenrelay/wire/_sse.py
// (both run the shared vectors in tests/vectors/sse.json).
// https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation
//
//   bytes          one TextDecoder per stream with {stream: true}: UTF-8 with U+FFFD replacement, never an
//                  exception, a character split over chunks is held until it is whole; the decoder drops one
//                  leading BOM (also when it arrives split), as the spec's "UTF-8 decode" does
//   line ends      CRLF, LF or a lone CR; a CR closing one chunk and an LF opening the next are one end
//   blank line     dispatch: last event id := id buffer; if data was seen, emit the event (data minus its
//                  final LF, type from the event buffer or "message"); reset data, type and retry
//   ":..."         comment, ignored
//   "name:value"   one leading space of the value is dropped; a line without a colon is a name with an
//                  empty value
//   data / event / id / retry
//                  append value + LF / set the type / set the id buffer unless the value holds U+0000 /
//                  only ASCII digits set the reconnection time; other names are ignored
//   end of stream  the unterminated event is discarded; `truncated` says one was cut
//   size limit     as in the Python parser: maxEventBytes bounds every line and the sum of an event's
//                  non-comment lines, in bytes received (line ends and the BOM not counted)
//
// The limit counts the bytes received, not the decoded text (a U+FFFD may stand for one to three bytes), so
// a light second pass over each chunk measures its lines in bytes. CR and LF never occur inside a UTF-8
// sequence and the decoder never holds one back, so the lines it finds are the decoded text's lines, in
// the same order, chunk for chunk.
//
// Contract (tested whole, one byte at a time, at every split offset and with random splits): for any way of
// cutting the input into chunks, the events joined over feed() calls and close() equal the events of
// feed(whole); close(), with the same lastEventId, retry and truncated. An input over the size limit gives
// the same events and then the same SSEError for every cutting.

/** The default bound on one line and on one event's field lines, in bytes, as in the Python parser. */
export const DEFAULT_MAX_EVENT_BYTES = 1 << 20;

const LINE_END = /[\r\n]/g;
const CR = 13;
const LF = 10;
const COLON = 58;
const BOM = [0xef, 0xbb, 0xbf];

/** The stream broke the parser's size limit; `code` matches the Python ProtocolError's code. */
export class SSEError extends Error {
  constructor(message, code) {
    super(message);
    this.name = 'SSEError';
    this.code = code;
  }
}

/**
 * @typedef {{type: string, data: string, id: string, retry: number | null}} ServerSentEvent
 * `type` is the event type (the `event` field, else "message"), as a DOM MessageEvent names it; `id` is the
 * stream's last event id when the event was dispatched (it is sticky); `retry` is the reconnection time set
 * by a `retry` field inside this event, else null.
 */

const encoder = new TextEncoder();
const STREAM = { stream: true }; // TextDecoder.decode's options, made once (decode runs per chunk)

/**
 * Incremental parser: `feed(chunk) -> ServerSentEvent[]`, then `close()`. See the contract above. A chunk is
 * bytes (a Uint8Array, as a fetch body gives them) or a string, which is taken as its UTF-8 bytes (a lone
 * surrogate in it becomes U+FFFD); one stream may mix both.
 */
export class SSEParser {
  /** @param {{maxEventBytes?: number, lastEventId?: string}} [options] */
  constructor({ maxEventBytes = DEFAULT_MAX_EVENT_BYTES, lastEventId = '' } = {}) {
    if (!(maxEventBytes >= 1)) throw new RangeError('maxEventBytes must be positive');
    this._limit = maxEventBytes;
    this._decoder = new TextDecoder('utf-8');
    this._partial = ''; // the unterminated last line, decoded
    this._skipLF = false; // the decoded text ended in CR: an LF opening the next text ends no new line
    // The byte pass: lengths of the lines completed by the current chunk, the current line's bytes so far,
    // how many leading bytes matched a BOM (-1 once the start is settled), and its own CR/LF pairing.
    this._lineBytes = [];
    this._nextLine = 0;
    this._partialBytes = 0;
    this._bomMatched = 0;
    this._byteSkipLF = false;
    this._data = null; // data field values joined with LF, or null when no data field was seen
    this._eventType = '';
    this._retryField = null;
    this._size = 0; // bytes of the current event's non-comment lines
    this._idBuffer = lastEventId;
    this._lastEventId = lastEventId;
    this._retry = null;
    this._error = null;
    this._closed = false;
    this._truncated = false;
  }

  /** The last event id string: the id buffer as it stood at the latest blank line. */
  get lastEventId() {
    return this._lastEventId;
  }

  /** The reconnection time in milliseconds from the latest valid `retry` field, else null. */
  get retry() {
    return this._retry;
  }

  /** After close(): whether the stream stopped inside an event (a field line, or a partial non-comment
   * line, with no blank line after it). Such an event is never dispatched. */
  get truncated() {
    return this._truncated;
  }

  /**
   * Parse the next chunk and return the events it completed. When the chunk breaks the size limit, the
   * events completed before the offending line are returned and the SSEError is thrown by the next call;
   * it is thrown at once when there are none.
   * @param {Uint8Array | string} chunk
   * @returns {ServerSentEvent[]}
   */
  feed(chunk) {
    if (this._error) throw this._error;
    if (this._closed) throw new Error('SSEParser.feed() after close()');
    if (typeof chunk === 'string') chunk = encoder.encode(chunk);
    else if (!(chunk instanceof Uint8Array))
      throw new TypeError('SSEParser.feed() takes a Uint8Array or a string');
    const events = [];
    this._measure(chunk);
    this._text(this._decoder.decode(chunk, STREAM), events);
    if (this._error && events.length === 0) throw this._error;
    return events;
  }

  /** End of stream. Returns no events (the spec discards an unterminated one); sets `truncated`. */
  close() {
    if (this._error) throw this._error;
    if (this._closed) return [];
    this._closed = true;
    // Bytes of an unfinished character (or of a BOM cut short) become U+FFFD; they never hold a line end.
    const tail = this._partial + this._decoder.decode();
    this._partial = '';
    this._truncated = this._size > 0 || (tail.length > 0 && tail.charCodeAt(0) !== COLON);
    this._data = null;
    return [];
  }

  /** The byte pass: the length in bytes of every line this chunk completes, and of the partial line. */
  _measure(chunk) {
    this._lineBytes.length = 0;
    this._nextLine = 0;
    let i = 0;
    while (this._bomMatched >= 0 && i < chunk.length) {
      if (chunk[i] === BOM[this._bomMatched]) {
        i += 1;
        this._bomMatched += 1;
        if (this._bomMatched === BOM.length) this._bomMatched = -1; // a BOM: the decoder drops it
      } else {
        this._partialBytes += this._bomMatched; // a BOM's first bytes, and then not a BOM: text
        this._bomMatched = -1;
      }
    }
    if (this._byteSkipLF && i < chunk.length) {
      this._byteSkipLF = false;
      if (chunk[i] === LF) i += 1;
    }
    // Line ends found with indexOf (a native scan): most chunks hold one or none.
    const n = chunk.length;
    let bytes = this._partialBytes;
    let nextCR = chunk.indexOf(CR, i);
    let nextLF = chunk.indexOf(LF, i);
    while (nextCR >= 0 || nextLF >= 0) {
      const end = nextCR < 0 ? nextLF : nextLF < 0 ? nextCR : Math.min(nextCR, nextLF);
      this._lineBytes.push(bytes + end - i);
      bytes = 0;
      i = end + 1;
      if (end === nextCR) {
        if (i === n) this._byteSkipLF = true;
        else if (chunk[i] === LF) i += 1;
      }
      if (nextCR >= 0 && nextCR < i) nextCR = chunk.indexOf(CR, i);
      if (nextLF >= 0 && nextLF < i) nextLF = chunk.indexOf(LF, i);
    }
    bytes += n - i;
    this._partialBytes = bytes;
  }

  _text(text, events) {
    let pos = 0;
    if (this._skipLF && text.length > 0) {
      this._skipLF = false;
      if (text.charCodeAt(0) === LF) pos = 1;
    }
    if (this._lineBytes.length === 0 && pos === 0) {
      // The byte pass found no line end in this chunk (most small chunks): the text joins the partial line.
      this._partial += text;
      this._checkPartial();
      return;
    }
    LINE_END.lastIndex = pos;
    for (;;) {
      const match = LINE_END.exec(text);
      if (match === null) break;
      const end = match.index;
      let line = text.slice(pos, end);
      if (this._partial) {
        line = this._partial + line;
        this._partial = '';
      }
      pos = end + 1;
      if (text.charCodeAt(end) === CR) {
        if (pos === text.length) this._skipLF = true;
        else if (text.charCodeAt(pos) === LF) pos += 1;
      }
      LINE_END.lastIndex = pos;
      this._line(line, this._lineBytes[this._nextLine++], events);
      if (this._error) return;
    }
    this._partial += text.slice(pos);
    this._checkPartial();
  }

  _checkPartial() {
    // A partial comment counts towards the line limit only; any other partial line towards the event's.
    const bytes = this._partialBytes;
    if (bytes > 0 && bytes + this._size > this._limit) {
      if (bytes > this._limit || this._partial.charCodeAt(0) !== COLON) this._fail();
    }
  }

  _line(line, bytes, events) {
    if (line.length === 0) {
      this._dispatch(events);
      return;
    }
    if (line.charCodeAt(0) === COLON) {
      // Comments are never stored, so they count towards the line limit only.
      if (bytes > this._limit) this._fail();
      return;
    }
    this._size += bytes;
    if (this._size > this._limit) {
      this._fail();
      return;
    }
    const colon = line.indexOf(':');
    let name = line;
    let value = '';
    if (colon >= 0) {
      name = line.slice(0, colon);
      value = line.slice(line.charCodeAt(colon + 1) === 32 ? colon + 2 : colon + 1);
    }
    if (name === 'data') {
      this._data = this._data === null ? value : this._data + '\n' + value;
    } else if (name === 'event') {
      this._eventType = value;
    } else if (name === 'id') {
      if (!value.includes('\0')) this._idBuffer = value;
    } else if (name === 'retry' && /^[0-9]+$/.test(value)) {
      // A hostile retry of thousands of digits still parses (to Infinity) rather than throwing.
      this._retry = this._retryField = Number(value);
    }
  }

  _dispatch(events) {
    this._lastEventId = this._idBuffer;
    if (this._data !== null) {
      events.push(
        Object.freeze({
          type: this._eventType || 'message',
          data: this._data,
          id: this._lastEventId,
          retry: this._retryField,
        }),
      );
      this._data = null;
    }
    this._eventType = '';
    this._retryField = null;
    this._size = 0;
  }

  _fail() {
    // One message for both limits: a long line can trip either check first, depending on the cutting.
    this._error = new SSEError(
      `SSE line or event exceeds maxEventBytes=${this._limit}`,
      'sse_event_too_large',
    );
    this._partial = '';
  }
}

/**
 * The parser as a TransformStream: `response.body.pipeThrough(new SSEParserStream())` is a stream of
 * ServerSentEvent objects. Chunks may be bytes or strings. At the end of the input the parser is closed;
 * an input over the size limit errors the stream with the SSEError. `parser` is there to read
 * `lastEventId`, `retry` and (after the end) `truncated`.
 */
export class SSEParserStream extends TransformStream {
  /** @param {{maxEventBytes?: number, lastEventId?: string}} [options] as for SSEParser */
  constructor(options) {
    const parser = new SSEParser(options);
    super({
      transform(chunk, controller) {
        const events = parser.feed(chunk);
        for (let i = 0; i < events.length; i++) controller.enqueue(events[i]);
      },
      flush() {
        parser.close();
      },
    });
    this.parser = parser;
  }
}
