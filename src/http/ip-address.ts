import { typeError } from '../core/errors';
import { describe } from '../core/validate';

/**
 * The rate-limit key for a client address: an IPv4 address as is; an IPv6 address that carries an
 * IPv4 address (see below) as that IPv4 address; any other IPv6 address as its /64 prefix in
 * canonical form (RFC 5952), zone id dropped. Anything that is not an IP address (a Unix socket path,
 * a proxy's `unknown`) is returned unchanged.
 *
 * Why /64: an IPv6 subscriber is normally given a whole /64 and can pick any of its 2^64 addresses,
 * so a limit per address would be no limit at all.
 *
 * Keyed by the IPv4 address they carry, so that each IPv4 client behind a translator or tunnel has
 * its own limit, shared with its plain IPv4 address:
 * - IPv4-mapped `::ffff:0:0/96` (a dual-stack socket's IPv4 clients), IPv4-translated
 *   `::ffff:0:0:0/96` (SIIT, RFC 2765) and IPv4-compatible `::/96` (RFC 4291; `::` and `::1` are
 *   the unspecified and loopback addresses, not IPv4 ones): the last 32 bits;
 * - NAT64's well-known prefix `64:ff9b::/96` (RFC 6052): the last 32 bits;
 * - 6to4 `2002::/16` (RFC 3056): bits 16 to 47, the IPv4 address of the site's whole /48;
 * - Teredo `2001::/32` (RFC 4380): the client's public IPv4 address, the last 32 bits inverted.
 * A reply to such an address travels to that IPv4 address, so a client can only complete a
 * connection from one it holds. Operator-chosen NAT64 prefixes (`64:ff9b:1::/48` and others) are
 * not recognized, since their format depends on a prefix length only the operator knows: pass your
 * own `key` there.
 *
 * @example
 * ```ts
 * import { addressKey } from 'ratekeeper/http';
 * addressKey('203.0.113.7'); // '203.0.113.7'
 * addressKey('::ffff:203.0.113.7'); // '203.0.113.7'
 * addressKey('64:ff9b::cb00:7107'); // '203.0.113.7'
 * addressKey('2002:cb00:7107:1::5'); // '203.0.113.7'
 * addressKey('2001:DB8:0:1:aaaa::1%eth0'); // '2001:db8:0:1::/64'
 * ```
 */
export function addressKey(address: string): string {
  if (typeof address !== 'string') throw typeError(`ratekeeper: \`address\` must be a string, got ${describe(address)}`);
  const ipv4 = parseIPv4(address);
  if (ipv4 !== undefined) return ipv4.join('.');
  const groups = parseIPv6(address);
  if (groups === undefined) return address;
  const embedded = embeddedIPv4(groups);
  if (embedded !== undefined) return [embedded >>> 24, (embedded >>> 16) & 0xff, (embedded >>> 8) & 0xff, embedded & 0xff].join('.');
  return `${formatIPv6([...groups.slice(0, 4), 0, 0, 0, 0])}/64`;
}

/** True for four decimal octets, each without leading zeros. */
export function isIPv4(text: string): boolean {
  return parseIPv4(text) !== undefined;
}

/** True for an IPv6 address in any RFC 4291 text form, with or without a `%zone`. */
export function isIPv6(text: string): boolean {
  return parseIPv6(text) !== undefined;
}

/** The IPv4 address (as a 32-bit number) that an IPv6 address carries, by the forms `addressKey` lists. */
function embeddedIPv4(groups: readonly number[]): number | undefined {
  const [g0 = 0, g1 = 0, g2 = 0, g3 = 0, g4 = 0, g5 = 0, g6 = 0, g7 = 0] = groups;
  const last32 = ((g6 << 16) | g7) >>> 0;
  if (g0 === 0x2002) return ((g1 << 16) | g2) >>> 0;
  if (g0 === 0x2001 && g1 === 0) return ~last32 >>> 0;
  const middle = g2 === 0 && g3 === 0;
  if (g0 === 0x64 && g1 === 0xff9b && middle && g4 === 0 && g5 === 0) return last32;
  if (g0 !== 0 || g1 !== 0 || !middle) return undefined;
  if ((g4 === 0 && g5 === 0xffff) || (g4 === 0xffff && g5 === 0)) return last32;
  return g4 === 0 && g5 === 0 && last32 > 1 ? last32 : undefined;
}

/** Four decimal octets without leading zeros, which some parsers would read as octal. */
function parseIPv4(text: string): number[] | undefined {
  const parts = text.split('.');
  if (parts.length !== 4) return undefined;
  const octets = parts.map((part) => (/^(0|[1-9]\d{0,2})$/.test(part) ? Number(part) : 256));
  return octets.every((octet) => octet < 256) ? octets : undefined;
}

/** Eight 16-bit groups, from any RFC 4291 text form: `::` compression, an IPv4 tail, a `%zone`. */
function parseIPv6(text: string): number[] | undefined {
  const zone = text.indexOf('%');
  const halves = (zone === -1 ? text : text.slice(0, zone)).split('::');
  if (halves.length > 2) return undefined;
  const [head = '', tail] = halves;
  const left = parseGroups(head, tail === undefined);
  const right = tail === undefined ? [] : parseGroups(tail, true);
  if (left === undefined || right === undefined) return undefined;
  if (tail === undefined) return left.length === 8 ? left : undefined;
  const missing = 8 - left.length - right.length;
  return missing >= 1 ? [...left, ...new Array<number>(missing).fill(0), ...right] : undefined;
}

function parseGroups(text: string, endsAddress: boolean): number[] | undefined {
  if (text === '') return [];
  const pieces = text.split(':');
  const groups: number[] = [];
  for (const [i, piece] of pieces.entries()) {
    if (/^[0-9a-f]{1,4}$/i.test(piece)) {
      groups.push(parseInt(piece, 16));
      continue;
    }
    const ipv4 = endsAddress && i === pieces.length - 1 ? parseIPv4(piece) : undefined;
    if (ipv4 === undefined) return undefined;
    const [a = 0, b = 0, c = 0, d = 0] = ipv4;
    groups.push((a << 8) | b, (c << 8) | d);
  }
  return groups;
}

/** RFC 5952 text: lowercase, no leading zeros, the longest run of two or more zero groups as `::`. */
function formatIPv6(groups: readonly number[]): string {
  let start = -1;
  let length = 1;
  for (let i = 0; i < groups.length; ) {
    let j = i;
    while (groups[j] === 0) j++;
    if (j - i > length) [start, length] = [i, j - i];
    i = j + 1;
  }
  const hex = groups.map((g) => g.toString(16));
  if (start === -1) return hex.join(':');
  return `${hex.slice(0, start).join(':')}::${hex.slice(start + length).join(':')}`;
}
