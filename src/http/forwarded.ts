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
 * Picks the client's address from the chain `[...hops, peer]`, trusting the last `trustProxies`
 * entries to be our own proxies: each appends the address it received from, so the client is the
 * address the outermost trusted proxy saw. Entries further left were written by the client and could
 * be anything, so they are used only when the chain is shorter than the proxies trusted (the request
 * reached us through fewer of them), as Express's `trust proxy` does.
 *
 * Without a peer address (a Fetch-API server that does not expose it) the nearest proxy is taken on
 * trust to be the peer.
 */
export function pickClient(peer: string | undefined, hops: readonly string[], trustProxies: number): string | undefined {
  if (trustProxies === 0) return peer;
  const chain = peer === undefined ? hops : [...hops, peer];
  return chain[Math.max(0, hops.length - trustProxies)];
}

/** The addresses a forwarding header lists, oldest first, each without port or brackets. */
export function forwardedHops(value: string | undefined, header: ForwardedHeader): string[] {
  if (value === undefined) return [];
  const hops = header === 'forwarded' ? forwardedFor(value) : value.split(',').map((hop) => hop.trim());
  return hops.filter((hop) => hop !== '').map(bareAddress);
}

/**
 * The `for` value of each RFC 7239 element. Values may be quoted strings holding `,`, `;` or `\`
 * escapes, so the field is scanned rather than split. An element without `for` still counts as a hop.
 */
function forwardedFor(value: string): string[] {
  const hops: string[] = [];
  let pair = '';
  let forValue: string | undefined;
  let element = false;
  let quoted = false;
  const endPair = () => {
    const eq = pair.indexOf('=');
    if (eq !== -1 && pair.slice(0, eq).trim().toLowerCase() === 'for') forValue = unquote(pair.slice(eq + 1).trim());
    if (pair.trim() !== '') element = true;
    pair = '';
  };
  for (let i = 0; i < value.length; i++) {
    const char = value[i];
    if (quoted && char === '\\') {
      pair += char + (value[++i] ?? '');
      continue;
    }
    if (char === '"') quoted = !quoted;
    if (quoted || (char !== ';' && char !== ',')) {
      pair += char;
      continue;
    }
    endPair();
    if (char === ',') {
      if (element) hops.push(forValue ?? 'unknown');
      [forValue, element] = [undefined, false];
    }
  }
  endPair();
  if (element) hops.push(forValue ?? 'unknown');
  return hops;
}

function unquote(value: string): string {
  if (value.length < 2 || !value.startsWith('"') || !value.endsWith('"')) return value;
  return value.slice(1, -1).replace(/\\(.)/g, '$1');
}

/** Drops the brackets and port from `[2001:db8::1]:4711` and the port from `192.0.2.1:4711`. */
function bareAddress(hop: string): string {
  if (hop.startsWith('[')) {
    const end = hop.indexOf(']');
    return end === -1 ? hop : hop.slice(1, end);
  }
  const colon = hop.indexOf(':');
  // One colon means IPv4 with a port: a bare IPv6 address has at least two.
  return colon !== -1 && colon === hop.lastIndexOf(':') ? hop.slice(0, colon) : hop;
}
