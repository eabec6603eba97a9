import { describe } from '../core/validate';

/**
 * The rate-limit key for a client address: an IPv4 address as is, an IPv4-mapped IPv6 address
 * (`::ffff:192.0.2.1`, which a dual-stack socket reports for IPv4 clients) as the IPv4 address it
 * carries, and any other IPv6 address as its /64 prefix in canonical form (RFC 5952), zone id
 * dropped. Anything that is not an IP address (a Unix socket path, a proxy's `unknown`) is returned
 * unchanged.
 *
 * Why /64: an IPv6 subscriber is normally given a whole /64 and can pick any of its 2^64 addresses,
 * so a limit per address would be no limit at all.
 *
 * @example
 * ```ts
 * import { addressKey } from 'ratekeeper/http';
 * addressKey('203.0.113.7'); // '203.0.113.7'
 * addressKey('::ffff:203.0.113.7'); // '203.0.113.7'
 * addressKey('2001:DB8:0:1:aaaa::1%eth0'); // '2001:db8:0:1::/64'
 * ```
 */
export function addressKey(address: string): string {
  if (typeof address !== 'string') throw new TypeError(`ratekeeper: \`address\` must be a string, got ${describe(address)}`);
  const ipv4 = parseIPv4(address);
  if (ipv4 !== undefined) return ipv4.join('.');
  const groups = parseIPv6(address);
  if (groups === undefined) return address;
  if (isIPv4Mapped(groups)) {
    const [high = 0, low = 0] = groups.slice(6);
    return [high >> 8, high & 0xff, low >> 8, low & 0xff].join('.');
  }
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

/** `::ffff:0:0/96`: the first 80 bits zero, then 16 ones. */
function isIPv4Mapped(groups: readonly number[]): boolean {
  return groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff;
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
