import { isIPv4, isIPv6 } from './ip-address';

/**
 * The request header a trusted proxy writes the client's address into: `X-Forwarded-For`, or the
 * `for=` of RFC 7239 `Forwarded`.
 *
 * @example
 * ```ts
 * import type { ForwardedHeader } from 'ratekeeper/http';
 * const forwardedHeader: ForwardedHeader = 'forwarded'; // the proxy writes `Forwarded: for=…`
 * ```
 */
export type ForwardedHeader = 'x-forwarded-for' | 'forwarded';

/** The choices of `forwardedHeader`. */
export const FORWARDED_HEADERS: readonly ForwardedHeader[] = ['x-forwarded-for', 'forwarded'];

/**
 * The most characters an address may take where a trusted proxy writes it: an `X-Forwarded-For`
 * entry, or the `for` value of a `Forwarded` element. A real one is well under it (an IPv6 address
 * with a port). Only what the proxy writes is counted: a `Forwarded` element's other parameters may
 * hold what the client chose (a `host` copied from its `Host`), of any length, and must not cost the
 * element. An `X-Forwarded-For` header is read for at most `trustProxies` × (this + 1) characters,
 * a `Forwarded` header for its trusted elements only, each character once.
 */
export const MAX_ADDRESS_LENGTH = 1024;

/**
 * The client's address behind `trustProxies` proxies, from the peer address and the forwarding
 * header's value. Each trusted proxy appends the address it received from, so the client is the
 * `trustProxies`-th entry from the right: the header is read from the right, one entry per trusted
 * proxy, and whatever lies further left (written by the client, and possibly malformed on purpose)
 * is never read. Reading stops early at a malformed entry, as it does at the start of a chain shorter
 * than `trustProxies`: the client is then the last address read, the one the proxies to its right
 * vouch for, or the peer when not even the nearest entry could be read.
 *
 * Without a peer address (a Fetch-API server that does not expose it) the nearest proxy is taken on
 * trust to be the peer.
 */
export function forwardedClient(peer: string | undefined, value: string | undefined, header: ForwardedHeader, trustProxies: number): string | undefined {
  if (trustProxies === 0 || value === undefined) return peer;
  return trustedHops(value, header, trustProxies)[0] ?? peer;
}

/**
 * The addresses of the last `count` entries of a forwarding header, oldest first, each without port
 * or brackets; fewer when the header has fewer entries or an entry read from the right is malformed
 * (the entries left of it are not read). Empty list elements are skipped (RFC 9110 §5.6.1).
 */
export function trustedHops(value: string, header: ForwardedHeader, count: number): string[] {
  const forwarded = header === 'forwarded';
  // A Forwarded element is as long as its proxy wrote it (its `host` may be the client's to choose):
  // it is never cut short, and the work stays linear in the trusted elements' length.
  const maxEntry = forwarded ? Infinity : MAX_ADDRESS_LENGTH;
  const floor = Math.max(0, value.length - count * (maxEntry + 1));
  const hops: string[] = [];
  let end = value.length;
  while (hops.length < count && end > 0) {
    const comma = entryStart(value, end, floor, forwarded, maxEntry);
    if (comma === undefined) break;
    const text = trimOws(value.slice(comma + 1, end));
    end = comma;
    if (text === '') continue;
    const address = forwarded ? forwardedFor(text) : forwardedAddress(text);
    if (address === undefined) break;
    hops.push(address);
  }
  return hops.reverse();
}

/**
 * The index of the comma before the entry that ends at `end` (-1 at the start of the value),
 * scanning leftwards; undefined when the entry is longer than `maxEntry` or the scan would pass
 * `floor`. In `Forwarded` (`quotes`), commas inside quoted strings are skipped and a quoted
 * string left open is undefined too; a `"` preceded by an odd run of backslashes is a quoted-pair,
 * as it is when read left to right.
 */
function entryStart(value: string, end: number, floor: number, quotes: boolean, maxEntry: number): number | undefined {
  const stop = Math.max(floor, end - maxEntry - 1);
  let quoted = false;
  for (let i = end - 1; i >= stop; i--) {
    const char = value[i];
    if (char === ',' && !quoted) return i;
    if (char !== '"' || !quotes) continue;
    let backslashes = 0;
    while (i - 1 - backslashes >= stop && value[i - 1 - backslashes] === '\\') backslashes++;
    if (!quoted || backslashes % 2 === 0) quoted = !quoted;
  }
  return stop === 0 && !quoted && end <= maxEntry ? -1 : undefined;
}

/**
 * The node of an RFC 7239 element's `for` parameter, parsed strictly: `pair *( ";" pair )` where a
 * pair is `token "=" ( token / quoted-string )`, no parameter twice, whitespace allowed only around
 * `;`; undefined for anything else. An element without `for` names no client: `unknown`. Only the
 * `for` value is unescaped and read as a node, and only it is bounded (`MAX_ADDRESS_LENGTH`): the
 * other values are skipped over, whatever their length.
 */
function forwardedFor(element: string): string | undefined {
  const seen = new Set<string>();
  let node = 'unknown';
  let i = 0;
  for (;;) {
    i = skipOws(element, i);
    if (element[i] === ';') {
      i++;
      continue;
    }
    if (i === element.length) return node;
    const name = token(element, i);
    if (name === '' || element[i + name.length] !== '=') return undefined;
    const start = i + name.length + 1;
    const end = valueEnd(element, start);
    if (end === undefined) return undefined;
    const lower = name.toLowerCase();
    if (seen.has(lower)) return undefined;
    seen.add(lower);
    if (lower === 'for') {
      if (end - start > MAX_ADDRESS_LENGTH) return undefined;
      const address = forNode(unquote(element.slice(start, end)));
      if (address === undefined) return undefined;
      node = address;
    }
    i = skipOws(element, end);
    if (i < element.length && element[i] !== ';') return undefined;
  }
}

/** tchar of RFC 9110 §5.6.2. */
const TCHAR = /[!#$%&'*+\-.^_`|~0-9A-Za-z]*/y;

function token(text: string, start: number): string {
  TCHAR.lastIndex = start;
  return TCHAR.exec(text)?.[0] ?? '';
}

/**
 * The index after the parameter value at `start`, a token or an RFC 9110 quoted-string (qdtext and
 * quoted-pairs); undefined when there is none.
 */
function valueEnd(text: string, start: number): number | undefined {
  if (text[start] !== '"') {
    const length = token(text, start).length;
    return length === 0 ? undefined : start + length;
  }
  for (let i = start + 1; i < text.length; i++) {
    let code = text.charCodeAt(i);
    if (code === 0x22) return i + 1;
    if (code === 0x5c) code = text.charCodeAt(++i);
    if (!(code === 0x09 || (code >= 0x20 && code !== 0x7f && code <= 0xff))) return undefined;
  }
  return undefined;
}

/** A value `valueEnd` accepted, its quotes and quoted-pairs undone. */
function unquote(value: string): string {
  return value.startsWith('"') ? value.slice(1, -1).replace(/\\([\s\S])/g, '$1') : value;
}

/**
 * The address of an RFC 7239 §6 node, port dropped: `IPv4address`, `"[" IPv6address "]"` (no zone
 * id), `unknown` (in any case, returned lowercase) or an obfuscated `_identifier`; undefined otherwise.
 */
function forNode(node: string): string | undefined {
  let name = node;
  let port: string | undefined;
  if (node.startsWith('[')) {
    const close = node.indexOf(']');
    if (close === -1) return undefined;
    name = node.slice(1, close);
    if (!isIPv6(name) || name.includes('%')) return undefined;
    const rest = node.slice(close + 1);
    if (rest !== '') {
      if (!rest.startsWith(':')) return undefined;
      port = rest.slice(1);
    }
  } else {
    const colon = node.indexOf(':');
    if (colon !== -1) [name, port] = [node.slice(0, colon), node.slice(colon + 1)];
    if (name.toLowerCase() === 'unknown') name = 'unknown';
    else if (!isIPv4(name) && !OBFUSCATED.test(name)) return undefined;
  }
  return port === undefined || PORT.test(port) ? name : undefined;
}

/** obfnode and obfport of RFC 7239 §6.3. */
const OBFUSCATED = /^_[A-Za-z0-9._-]+$/;
const PORT = /^(\d{1,5}|_[A-Za-z0-9._-]+)$/;

/**
 * The address of an `X-Forwarded-For` entry, port and brackets dropped: an IP address, bracketed
 * when it is IPv6 with a port, or `unknown`; undefined for anything else. The header has no
 * specification; this is what proxies write.
 */
function forwardedAddress(entry: string): string | undefined {
  if (entry.toLowerCase() === 'unknown') return 'unknown';
  if (entry.startsWith('[')) {
    const close = entry.indexOf(']');
    const address = entry.slice(1, close);
    const rest = entry.slice(close + 1);
    return close !== -1 && isZonedIPv6(address) && (rest === '' || /^:\d{1,5}$/.test(rest)) ? address : undefined;
  }
  if (isZonedIPv6(entry)) return entry;
  const colon = entry.indexOf(':');
  const address = colon === -1 ? entry : entry.slice(0, colon);
  return isIPv4(address) && (colon === -1 || /^\d{1,5}$/.test(entry.slice(colon + 1))) ? address : undefined;
}

/** An IPv6 address, with a zone id of RFC 6874's characters if any (`fe80::1%eth0`). */
function isZonedIPv6(text: string): boolean {
  const zone = text.indexOf('%');
  return isIPv6(text) && (zone === -1 || /^[\w.~%-]+$/.test(text.slice(zone + 1)));
}

/** Skips optional whitespace (SP and HTAB) from `i`. */
function skipOws(text: string, i: number): number {
  while (text[i] === ' ' || text[i] === '\t') i++;
  return i;
}

/** Drops leading and trailing SP and HTAB (a loop: a `[ \t]+$` regex backtracks quadratically). */
function trimOws(text: string): string {
  let end = text.length;
  while (end > 0 && (text[end - 1] === ' ' || text[end - 1] === '\t')) end--;
  return text.slice(skipOws(text, 0), end);
}
