// Streamed JSON for the page: PartialJSON turns a JSON text arriving in pieces into a value that only grows.
// The twin of src/tokenrelay/_partial_json.py (same rule, same events; both run the shared vectors in
// tests/vectors/partial_json.json).
//
// The snapshot rule (what `parser.value` shows after any prefix of the text):
//   - every value in the snapshot is a prefix of its final value, and everything that can be shown is shown;
//   - a string appears at its opening quote (as "") and grows; a trailing unfinished escape (`\`, `\u12`) is
//     held back, and so is a high-surrogate escape (`\ud83d`) until its low half has fully arrived; a lone
//     surrogate escape becomes U+FFFD (a high one as soon as the next character shows it has no low half).
//     Raw characters are kept as they are; a raw high surrogate that ends a piece is held until the next
//     piece (a JS string is UTF-16: a cut can fall inside a pair, which Python's code points cannot);
//   - a number appears only once complete: when a delimiter follows, or at finish() for a top-level number;
//   - true, false and null appear once their last letter arrives;
//   - an array or object appears at its `[` / `{`; a key appears as soon as its value can be shown;
//   - objects and arrays are updated in place: `value` is the same live root every time, and reading it costs
//     nothing (the open string is re-assigned once per feed; V8's rope strings make the append O(1));
//   - a repeated key replaces the earlier value, as JSON.parse does.
//
// What is accepted is RFC 8259 exactly, checked at every character: JSONSyntaxError (with `offset`, the
// offending character's offset in the whole text, in UTF-16 code units) is thrown by the feed() that brings
// the first character that cannot be continued into JSON: `{"a": 12]` at the `]`, `[1,]`, `01`, `1.e5`,
// trailing text, a leading BOM, NaN. After a syntax error every call throws it again. finish() returns the
// final value, or throws TruncatedJSONError carrying the snapshot when the text ended before the value did.
// Both are SyntaxErrors, as JSON.parse's are. Nesting deeper than maxDepth (512) is refused at its bracket.
//
// Events (plain objects, each naming its value by `path`: keys and indices from the root, [] for the root):
//   {type: 'started', path, kind}    kind: object | array | string | number | boolean | null
//   {type: 'grew', path, text}       the string at path grew by text (at most one per string per feed)
//   {type: 'completed', path, value} the value is final (a container: the snapshot's own, now final)
// Contract (tested whole, one code unit at a time, at every split and at random cuts): for any cutting of the
// text, the events joined over the feed() calls (joinEvents: adjacent growth of one string merged; a syntax
// error's `events` last) equal those of feed(whole), the snapshot after each piece is that of the whole
// text's prefix of that length, and finish() (value or error) is the same. finish() adds no events.

export const DEFAULT_MAX_DEPTH = 512;

// Where the parser is (see the Python module): between values, or inside a string, number or literal.
const VALUE = 0;
const VALUE_OR_CLOSE = 1;
const KEY_OR_CLOSE = 2;
const KEY = 3;
const COLON = 4;
const AFTER = 5;
const END = 6;
const STRING = 7;
const NUMBER = 8;
const WORD = 9;

const EXPECTED = ['a value', "a value or ']'", "a string key or '}'", 'a string key', "':'"];
const ESCAPES = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
const WORDS = { t: ['true', true, 'boolean'], f: ['false', false, 'boolean'], n: ['null', null, 'null'] };
// The longest prefix of a text that some valid number starts with ("1." yes, "1.e" no: it stops at "1.").
const NUMBER_PREFIX = /^-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][+-]?[0-9]*)?|\.|[eE][+-]?[0-9]*)?)?/;
const WHOLE_NUMBER = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$/;

/** Text that must be one JSON value is not (the family of the two errors below). */
export class JSONError extends SyntaxError {}

/** The text cannot be continued into valid JSON; `offset` is where (UTF-16 code units). */
export class JSONSyntaxError extends JSONError {
  constructor(reason, offset, events = []) {
    super(`${reason} at offset ${offset}`);
    this.name = 'JSONSyntaxError';
    this.reason = reason;
    this.offset = offset;
    this.events = events;
  }
}

/** The text ended before its value did; `value` is the snapshot (`hasValue` false: none had started). */
export class TruncatedJSONError extends JSONError {
  constructor(message, value, hasValue) {
    super(message);
    this.name = 'TruncatedJSONError';
    this.value = value;
    this.hasValue = hasValue;
  }
}

/** feed() after finish(): a caller's bug (UseAfterFinishError in the Python core). */
export class UseAfterFinishError extends Error {
  constructor(message) {
    super(message);
    this.name = 'UseAfterFinishError';
  }
}

/** `events` with adjacent growth of one string merged: the form in which every split's events are equal. */
export function joinEvents(events) {
  const joined = [];
  for (const event of events) {
    const last = joined[joined.length - 1];
    if (
      event.type === 'grew' &&
      last !== undefined &&
      last.type === 'grew' &&
      samePath(last.path, event.path)
    )
      joined[joined.length - 1] = { type: 'grew', path: event.path, text: last.text + event.text };
    else joined.push(event);
  }
  return joined;
}

function samePath(a, b) {
  if (a.length !== b.length) return false;
  for (let k = 0; k < a.length; k++) if (a[k] !== b[k]) return false;
  return true;
}

/** An object member as JSON.parse makes it: an own property even for "__proto__". */
function setMember(object, key, value) {
  if (key === '__proto__')
    Object.defineProperty(object, key, { value, writable: true, enumerable: true, configurable: true });
  else object[key] = value;
}

const isHex = (c) => (c >= 48 && c <= 57) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);

/** Incremental parser: `feed(text) -> events`, the live snapshot `value`, `finish()`. See the rule above. */
export class PartialJSON {
  constructor({ maxDepth = DEFAULT_MAX_DEPTH } = {}) {
    if (!(maxDepth >= 1)) throw new RangeError('maxDepth must be positive');
    this._maxDepth = maxDepth;
    this._mode = VALUE;
    this._stack = []; // the open containers, the root first
    this._paths = []; // the path of each
    this._key = ''; // the key of the member being read in the innermost object
    this._root = null;
    this._hasValue = false;
    this._offset = 0; // code units fed before the current piece
    this._events = [];
    this._inKey = false;
    this._keyText = '';
    this._text = ''; // the open value string as shown
    this._fresh = ''; // what this feed added to it (one 'grew' event when the feed ends)
    this._holder = null; // the container holding the open string (null: it is the root)
    this._slot = 0;
    this._stringPath = [];
    this._escape = ''; // an unfinished escape: "\\", "\\u", "\\u1", ...
    this._high = 0; // a high-surrogate escape waiting for its low half
    this._rawHigh = ''; // a raw high surrogate that ended the last piece
    this._number = '';
    this._word = '';
    this._wordValue = null;
    this._wordKind = 'null';
    this._start = 0;
    this._error = null;
    this._finished = false;
    this._final = undefined;
  }

  /** The snapshot: the live root value (null while `hasValue` is false). */
  get value() {
    return this._root;
  }

  /** Whether a value has started (`value` is null both before that and for `null`). */
  get hasValue() {
    return this._hasValue;
  }

  /** Read the next piece of the text; the events it caused. Throws JSONSyntaxError at the first bad char. */
  feed(text) {
    if (this._finished) throw new UseAfterFinishError('PartialJSON.feed() after finish()');
    if (this._error !== null) throw this._again();
    const events = (this._events = []);
    const n = text.length;
    let i = 0;
    while (i < n) {
      const mode = this._mode;
      if (mode === STRING) i = this._inString(text, i, n);
      else if (mode === NUMBER) i = this._inNumber(text, i, n);
      else if (mode === WORD) i = this._inWord(text, i, n);
      else i = this._between(text, i, n, mode);
    }
    if (this._fresh !== '') this._grew();
    this._offset += n;
    return events;
  }

  /** The input is over: the final value; throws TruncatedJSONError or the earlier JSONSyntaxError. */
  finish() {
    if (this._error !== null) throw this._again();
    if (!this._finished) {
      this._finished = true;
      if (this._mode === NUMBER && this._stack.length === 0 && WHOLE_NUMBER.test(this._number)) {
        this._events = []; // the top-level number's events: finish() reports none
        this._scalar(Number(this._number), 'number');
      }
      if (this._mode === END) this._final = { value: this._root };
      else
        this._final = {
          error: new TruncatedJSONError(
            `the JSON text ended ${this._where()} at offset ${this._offset}: the value is incomplete`,
            this._root,
            this._hasValue,
          ),
        };
    }
    if (this._final.error !== undefined) throw this._final.error;
    return this._final.value;
  }

  // -- between tokens ------------------------------------------------------------------------------------

  _between(text, i, n, mode) {
    let c = text.charCodeAt(i);
    while (c === 32 || c === 10 || c === 13 || c === 9) {
      if (++i === n) return n;
      c = text.charCodeAt(i);
    }
    if (mode === AFTER) {
      const isObject = !Array.isArray(this._stack[this._stack.length - 1]);
      if (c === 44) this._mode = isObject ? KEY : VALUE;
      else if (c === (isObject ? 125 : 93)) this._close();
      else this._fail(i, `expected ',' or '${isObject ? '}' : ']'}'`);
      return i + 1;
    }
    if (mode <= VALUE_OR_CLOSE) return this._beginValue(text, i, c, mode);
    if (mode === COLON) {
      if (c !== 58) this._fail(i, "expected ':'");
      this._mode = VALUE;
      return i + 1;
    }
    if (mode <= KEY && c === 34) {
      this._inKey = true;
      this._keyText = '';
      this._mode = STRING;
      return i + 1;
    }
    if (mode === KEY_OR_CLOSE && c === 125) {
      this._close();
      return i + 1;
    }
    this._fail(i, mode === END ? 'unexpected text after the JSON value' : `expected ${EXPECTED[mode]}`);
  }

  _beginValue(text, i, c, mode) {
    if (c === 34) {
      const path = this._place('', 'string');
      const stack = this._stack;
      this._holder = stack.length ? stack[stack.length - 1] : null;
      this._slot = stack.length ? path[path.length - 1] : 0;
      this._stringPath = path;
      this._text = '';
      this._inKey = false;
      this._mode = STRING;
      return i + 1;
    }
    if (c === 123 || c === 91) {
      if (this._stack.length === this._maxDepth)
        this._fail(i, `nesting deeper than ${this._maxDepth} levels (max_depth)`);
      const container = c === 123 ? {} : [];
      this._paths.push(this._place(container, c === 123 ? 'object' : 'array'));
      this._stack.push(container);
      this._mode = c === 123 ? KEY_OR_CLOSE : VALUE_OR_CLOSE;
      return i + 1;
    }
    if (c === 45 || (c >= 48 && c <= 57)) {
      this._mode = NUMBER;
      this._number = '';
      this._start = this._offset + i;
      return i;
    }
    const word = WORDS[text[i]];
    if (word !== undefined) {
      this._mode = WORD;
      [this._word, this._wordValue, this._wordKind] = word;
      this._start = this._offset + i;
      return i;
    }
    if (c === 93 && mode === VALUE_OR_CLOSE) {
      this._close();
      return i + 1;
    }
    if (c === 0xfeff && this._offset + i === 0) this._fail(i, 'a byte-order mark (U+FEFF) is not JSON');
    this._fail(i, `expected ${EXPECTED[mode]}`);
  }

  /** Put a value that starts now into the snapshot; its path. */
  _place(value, kind) {
    const stack = this._stack;
    let path;
    if (stack.length) {
      const top = stack[stack.length - 1];
      let key;
      if (Array.isArray(top)) {
        key = top.length;
        top.push(value);
      } else {
        key = this._key;
        setMember(top, key, value);
      }
      path = [...this._paths[this._paths.length - 1], key];
    } else {
      this._root = value;
      this._hasValue = true;
      path = [];
    }
    this._events.push({ type: 'started', path, kind });
    return path;
  }

  _close() {
    const container = this._stack.pop();
    this._events.push({ type: 'completed', path: this._paths.pop(), value: container });
    this._mode = this._stack.length ? AFTER : END;
  }

  // -- inside tokens -------------------------------------------------------------------------------------

  _add(piece) {
    if (this._inKey) this._keyText += piece;
    else this._fresh += piece;
  }

  _inString(text, i, n) {
    while (i < n) {
      if (this._escape !== '') {
        i = this._continueEscape(text, i, n);
        continue;
      }
      if (this._rawHigh !== '') {
        this._add(this._rawHigh); // released before whatever follows: a low half makes it a pair
        this._rawHigh = '';
      }
      let j = i;
      let c = 0;
      while (j < n) {
        c = text.charCodeAt(j);
        if (c === 34 || c === 92 || c < 32) break;
        j++;
      }
      if (j > i) {
        if (this._high) {
          this._high = 0;
          this._add('\ufffd');
        }
        if (j === n) {
          const last = text.charCodeAt(n - 1);
          if (last >= 0xd800 && last <= 0xdbff) {
            this._add(text.slice(i, n - 1));
            this._rawHigh = text[n - 1];
          } else this._add(text.slice(i, n));
          return n;
        }
        this._add(text.slice(i, j));
      }
      if (c === 34) {
        this._closeString();
        return j + 1;
      }
      if (c !== 92)
        this._fail(
          j,
          `raw control character U+${c.toString(16).toUpperCase().padStart(4, '0')} in a string (escape it)`,
        );
      if (j + 1 < n) {
        const e = text[j + 1];
        if (e === 'u') {
          if (
            j + 5 < n &&
            isHex(text.charCodeAt(j + 2)) &&
            isHex(text.charCodeAt(j + 3)) &&
            isHex(text.charCodeAt(j + 4)) &&
            isHex(text.charCodeAt(j + 5))
          ) {
            this._codeUnit(parseInt(text.slice(j + 2, j + 6), 16));
            i = j + 6;
            continue;
          }
        } else if (Object.hasOwn(ESCAPES, e)) {
          this._codeUnit(ESCAPES[e].charCodeAt(0));
          i = j + 2;
          continue;
        }
      }
      this._escape = '\\'; // cut short, or invalid: the slow path finds which
      i = j + 1;
    }
    return i;
  }

  _continueEscape(text, i, n) {
    let escape = this._escape;
    while (i < n) {
      const c = text[i];
      if (escape === '\\') {
        if (c === 'u') {
          escape = '\\u';
          i++;
          continue;
        }
        if (!Object.hasOwn(ESCAPES, c)) this._fail(i, `invalid escape '\\${c}'`);
        this._escape = '';
        this._codeUnit(ESCAPES[c].charCodeAt(0));
        return i + 1;
      }
      if (!isHex(text.charCodeAt(i))) this._fail(i, 'expected a hex digit in a \\u escape');
      escape += c;
      i++;
      if (escape.length === 6) {
        this._escape = '';
        this._codeUnit(parseInt(escape.slice(2), 16));
        return i;
      }
    }
    this._escape = escape;
    return i;
  }

  /** One escaped UTF-16 code unit: a high surrogate waits for its low half; a lone one is U+FFFD. */
  _codeUnit(code) {
    if (this._high) {
      const high = this._high;
      this._high = 0;
      if (code >= 0xdc00 && code <= 0xdfff) {
        this._add(String.fromCharCode(high, code));
        return;
      }
      this._add('\ufffd');
    }
    if (code >= 0xd800 && code <= 0xdbff) this._high = code;
    else if (code >= 0xdc00 && code <= 0xdfff) this._add('\ufffd');
    else this._add(String.fromCharCode(code));
  }

  _closeString() {
    if (this._high) {
      this._high = 0;
      this._add('\ufffd');
    }
    if (this._inKey) {
      this._key = this._keyText;
      this._keyText = '';
      this._inKey = false;
      this._mode = COLON;
      return;
    }
    if (this._fresh !== '') this._grew();
    const final = this._text;
    this._text = '';
    this._holder = null;
    this._events.push({ type: 'completed', path: this._stringPath, value: final });
    this._mode = this._stack.length ? AFTER : END;
  }

  /** This feed's new text of the open value string into the snapshot: one 'grew' event. */
  _grew() {
    const piece = this._fresh;
    this._fresh = '';
    this._text += piece;
    if (this._holder === null) this._root = this._text;
    else if (Array.isArray(this._holder)) this._holder[this._slot] = this._text;
    else setMember(this._holder, this._slot, this._text);
    this._events.push({ type: 'grew', path: this._stringPath, text: piece });
  }

  _inNumber(text, i, n) {
    let j = i;
    while (j < n) {
      const c = text.charCodeAt(j);
      // digits . + - e E
      if ((c >= 48 && c <= 57) || c === 46 || c === 43 || c === 45 || c === 101 || c === 69) j++;
      else break;
    }
    const number = this._number + text.slice(i, j);
    const valid = NUMBER_PREFIX.exec(number)[0].length;
    if (valid < number.length)
      this._fail(this._start + valid - this._offset, `unexpected '${number[valid]}' in a number`);
    this._number = number;
    if (j === n) return n;
    if (!WHOLE_NUMBER.test(number)) this._fail(j, 'expected a digit');
    this._scalar(Number(number), 'number');
    return j;
  }

  _scalar(value, kind) {
    this._events.push({ type: 'completed', path: this._place(value, kind), value });
    this._mode = this._stack.length ? AFTER : END;
  }

  _inWord(text, i, n) {
    const word = this._word;
    for (let k = this._offset + i - this._start; k < word.length; k++) {
      if (i === n) return n;
      if (text[i] !== word[k]) this._fail(i, `expected '${word}'`);
      i++;
    }
    this._scalar(this._wordValue, this._wordKind);
    return i;
  }

  _where() {
    const mode = this._mode;
    if (mode === STRING) return this._inKey ? 'inside a key' : 'inside a string';
    if (mode === NUMBER) return 'inside a number';
    if (mode === WORD) return `inside '${this._word}'`;
    if (this._stack.length)
      return Array.isArray(this._stack[this._stack.length - 1]) ? 'inside an array' : 'inside an object';
    return 'before any value';
  }

  // -- errors --------------------------------------------------------------------------------------------

  /** Throw the syntax error at offset `i` of the current piece, with the events before it. */
  _fail(i, reason) {
    if (this._fresh !== '') this._grew();
    this._error = new JSONSyntaxError(reason, this._offset + i, this._events);
    this._events = [];
    throw this._error;
  }

  _again() {
    return new JSONSyntaxError(this._error.reason, this._error.offset);
  }
}
