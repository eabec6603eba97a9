import { integerIn } from '../core/validate';
import { assertObject, oneOf } from './check';
import { FORWARDED_HEADERS, type ForwardedHeader, forwardedClient } from './forwarded';

/** Options of {@link resolveClientAddress}: the same as the middleware's. */
export interface ClientAddressOptions {
  /** How many reverse proxies in front of the server to trust (0 to 16). @default 0 */
  trustProxies?: number | undefined;
  /** The header the trusted proxies write. @default 'x-forwarded-for' */
  forwardedHeader?: ForwardedHeader | undefined;
}

/** Request headers as Fetch (`Headers`) or Node (`req.headers`) gives them. */
export type HeadersLike = { get(name: string): string | null } | Record<string, string | string[] | undefined>;

/**
 * The client's address exactly as the middleware resolves it for its default key, for routes
 * written by hand: the peer address, or with `trustProxies: n` the address the outermost trusted
 * proxy saw. Undefined when there is no peer address and no trusted proxy named one. Pass the
 * result to `addressKey` for the key the middleware would use (IPv6 by /64).
 *
 * @example
 * ```ts
 * import { addressKey, resolveClientAddress } from 'ratekeeper/http';
 * const headers = { 'x-forwarded-for': '198.51.100.1, 203.0.113.7' };
 * resolveClientAddress('10.0.0.2', headers, { trustProxies: 1 }); // '203.0.113.7'
 * resolveClientAddress('10.0.0.2', headers); // '10.0.0.2': forwarded headers are ignored unless trusted
 * addressKey(resolveClientAddress('2001:db8::1', {}) ?? 'unknown'); // '2001:db8::/64'
 * ```
 */
export function resolveClientAddress(peer: string | undefined, headers: HeadersLike, options: ClientAddressOptions = {}): string | undefined {
  assertObject('`headers`', headers);
  assertObject('resolveClientAddress options', options);
  const { trustProxies = 0, forwardedHeader = 'x-forwarded-for' } = options;
  integerIn('trustProxies', trustProxies, 0, 16);
  oneOf('forwardedHeader', forwardedHeader, FORWARDED_HEADERS);
  // The middleware's own reading (src/http/request-limit.ts): from the right, never past a malformed entry.
  return forwardedClient(peer, headerOf(headers, forwardedHeader), forwardedHeader, trustProxies);
}

/** One header's value: Fetch's `get`, or Node's lowercase record (a repeated header joined). */
function headerOf(headers: HeadersLike, name: string): string | undefined {
  if (typeof headers.get === 'function') return (headers as { get(name: string): string | null }).get(name) ?? undefined;
  const value = (headers as Record<string, string | string[] | undefined>)[name];
  return Array.isArray(value) ? value.join(', ') : value;
}
