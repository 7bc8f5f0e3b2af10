// The conversation's DOM: one <article class="turn"> per message, with its role, its body, a meta line
// (status and timings) and its action buttons (Copy, Edit, Regenerate). Text is set with textContent and
// nodes are created one by one: nothing here ever parses HTML.

/**
 * A new turn at the end of `container`.
 * @param {Element} container
 * @param {'user' | 'assistant' | 'tool'} role a tool turn is a result the user gave for a call
 * @param {'markdown' | 'json'} [format] how an assistant reply's body is drawn
 * @returns {{article: HTMLElement, body: HTMLElement, meta: HTMLElement, actions: HTMLElement}}
 */
export function addTurn(container, role, format = 'markdown') {
  const doc = container.ownerDocument;
  const article = doc.createElement('article');
  article.className = `turn ${role}`;
  const label = doc.createElement('div');
  label.className = 'role';
  label.textContent = role === 'user' ? 'You' : role === 'tool' ? 'Tool result' : 'Assistant';
  const body = doc.createElement('div');
  body.className = role === 'assistant' ? `body ${format}` : 'body';
  const meta = doc.createElement('div');
  meta.className = 'meta';
  const actions = doc.createElement('div');
  actions.className = 'actions';
  article.append(label, body, meta, actions);
  container.append(article);
  return { article, body, meta, actions };
}

/** A small text button for a turn's action bar. */
export function actionButton(doc, name, label, onClick) {
  const button = doc.createElement('button');
  button.type = 'button';
  button.className = `action ${name}`;
  button.textContent = label;
  button.addEventListener('click', onClick);
  return button;
}

/**
 * The meta line while a reply streams: the numbers so far.
 * @param {import('./chat.js').Stats} stats
 */
export function liveText(stats) {
  const parts = [];
  if (stats.ttftMs !== null) parts.push(`TTFT ${Math.round(stats.ttftMs)} ms`);
  if (stats.tokensPerSecond !== null) parts.push(`${stats.tokensPerSecond.toFixed(1)} tokens/s`);
  if (stats.tokens > 0) parts.push(`${stats.tokens} tokens`);
  return parts.join(' · ');
}

/**
 * The meta line of a reply that has ended; an unfinished one must not look finished.
 * @param {import('./chat.js').Outcome} outcome
 */
export function outcomeText(outcome) {
  const parts = [];
  if (outcome.status === 'error') {
    parts.push(`Error: ${outcome.error}`);
  } else if (outcome.status === 'truncated') {
    const why = outcome.error ? ` (${outcome.error})` : '';
    parts.push(`Truncated: the stream ended before the reply was finished${why}`);
  } else if (outcome.status === 'stopped') {
    parts.push('Stopped');
  } else if (outcome.finishReason && outcome.finishReason !== 'stop') {
    parts.push(`finish_reason: ${outcome.finishReason}`);
  }
  const live = liveText(outcome);
  if (live !== '') parts.push(live);
  parts.push(`${(outcome.totalMs / 1000).toFixed(2)} s total`);
  return parts.join(' · ');
}

/** Show how a reply ended on its turn. */
export function showOutcome({ article, meta }, outcome) {
  article.classList.remove('streaming');
  article.classList.add(outcome.status);
  meta.textContent = outcomeText(outcome);
  if (outcome.status === 'error' || outcome.status === 'truncated') meta.setAttribute('role', 'alert');
}

/**
 * A Copy button in the corner of every code block under `root` that has none yet. The button is an icon
 * (drawn by CSS), so it adds no text to the reply.
 */
export function addCodeCopyButtons(root) {
  const doc = root.ownerDocument;
  for (const pre of root.querySelectorAll('pre')) {
    if (pre.querySelector(':scope > button.copy-code')) continue;
    const button = doc.createElement('button');
    button.type = 'button';
    button.className = 'copy-code';
    button.setAttribute('aria-label', 'Copy code');
    button.title = 'Copy code';
    button.addEventListener('click', async () => {
      const ok = await copyText(doc, pre.querySelector('code')?.textContent ?? '');
      flash(button, ok);
    });
    pre.prepend(button);
  }
}

/** Show for a moment that a copy worked (or did not) on the button that did it. */
export function flash(button, ok) {
  const label = button.getAttribute('aria-label');
  button.classList.add(ok ? 'copied' : 'failed');
  if (label !== null) button.setAttribute('aria-label', ok ? 'Copied' : 'Copy failed');
  const text = button.textContent;
  if (text !== '') button.textContent = ok ? 'Copied' : 'Copy failed';
  setTimeout(() => {
    button.classList.remove('copied', 'failed');
    if (label !== null) button.setAttribute('aria-label', label);
    if (text !== '') button.textContent = text;
  }, 1500);
}

/**
 * Put `text` on the clipboard. The Clipboard API needs a secure context (https, or localhost); a page served
 * over plain HTTP on a LAN address falls back to copying a selection.
 * @returns {Promise<boolean>}
 */
export async function copyText(doc, text) {
  const clipboard = doc.defaultView?.navigator.clipboard;
  if (clipboard && doc.defaultView.isSecureContext) {
    try {
      await clipboard.writeText(text);
      return true;
    } catch {
      // Refused (no permission, page not focused): try the selection below.
    }
  }
  const area = doc.createElement('textarea');
  area.value = text;
  area.setAttribute('readonly', '');
  area.className = 'offscreen';
  doc.body.append(area);
  area.select();
  let ok = false;
  try {
    ok = doc.execCommand('copy');
  } catch {
    ok = false;
  }
  area.remove();
  return ok;
}
