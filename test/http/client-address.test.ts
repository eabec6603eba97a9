// src/http/ip-address.ts (addressKey: IPv6 /64, embedded IPv4 addresses), src/http/forwarded.ts and src/http/client-address.ts.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { addressKey, resolveClientAddress } from '../../src/http';
import { forwardedClient, MAX_ADDRESS_LENGTH, trustedHops } from '../../src/http/forwarded';
import { rangeError, typeError } from '../../src/core/errors';

describe('addressKey', () => {
  it.each([
    ['203.0.113.7', '203.0.113.7'],
    ['0.0.0.0', '0.0.0.0'],
    ['255.255.255.255', '255.255.255.255'],
    ['::ffff:203.0.113.7', '203.0.113.7'],
    ['::FFFF:CB00:7107', '203.0.113.7'],
    ['0:0:0:0:0:ffff:192.0.2.1', '192.0.2.1'],
    ['2001:db8:85a3:8d3:1319:8a2e:370:7348', '2001:db8:85a3:8d3::/64'],
    ['2001:0DB8:0000:0001:0000:0000:0000:0001', '2001:db8:0:1::/64'],
    ['2001:db8::1', '2001:db8::/64'],
    ['2001:db8:0:0:1::1', '2001:db8::/64'],
    ['fe80::1%eth0', 'fe80::/64'],
    ['fe80::abcd:1%25en0', 'fe80::/64'],
    ['::1', '::/64'],
    ['::', '::/64'],
    ['1::', '1::/64'],
    ['1:0:0:4:5:6:7:8', '1:0:0:4::/64'],
    ['0:0:1:0:5:6:7:8', '0:0:1::/64'],
    ['2001:db8::192.0.2.1', '2001:db8::/64'],
    ['::192.0.2.1', '192.0.2.1'],
    ['::0.0.0.2', '0.0.0.2'],
    ['::0.0.0.1', '::/64'],
    ['::1:0:0:1', '::/64'],
    ['::ffff:0:192.0.2.1', '192.0.2.1'],
    ['::FFFF:0:C000:201%eth0', '192.0.2.1'],
    ['::ffff:1:192.0.2.1', '::/64'],
    ['::fffe:192.0.2.1', '::/64'],
    ['64:ff9b::198.51.100.7', '198.51.100.7'],
    ['0064:FF9B:0000:0000:0000:0000:C633:6407', '198.51.100.7'],
    ['64:ff9b::1:198.51.100.7', '64:ff9b::/64'],
    ['64:ff9b:1::198.51.100.7', '64:ff9b:1::/64'],
    ['2002:c633:6407::', '198.51.100.7'],
    ['2002:C633:6407:ffff:1:2:3:4', '198.51.100.7'],
    ['2002::1', '0.0.0.0'],
    ['2001:0:4136:e378:8000:63bf:3fff:fdd2', '192.0.2.45'],
    ['2001:0:1:2:3:4:ffff:ffff', '0.0.0.0'],
    ['2001:1::1', '2001:1::/64'],
  ])('%s is limited as %s', (address, key) => {
    expect(addressKey(address)).toBe(key);
  });

  it.each([
    'unknown',
    '_hidden',
    '/var/run/app.sock',
    '',
    '01.2.3.4',
    '256.1.1.1',
    '1.2.3',
    '1::2::3',
    '1:2:3:4:5:6:7:8:9',
    '1:2:3:4::5:6:7:8',
    '12345::',
    ':1',
    '1.2.3.4::',
    '[::1]',
  ])('leaves %j, which is no IP address, as it is', (text) => {
    expect(addressKey(text)).toBe(text);
  });

  it('refuses a non-string', () => {
    expect(() => addressKey(7 as never)).toThrow(typeError('ratekeeper: `address` must be a string, got 7'));
  });

  const groups = fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 8, maxLength: 8 });
  const fullForm = (g: number[]) => g.map((x) => x.toString(16).padStart(4, '0').toUpperCase()).join(':');
  /** The WHATWG URL parser canonicalizes IPv6 the RFC 5952 way: an independent oracle. */
  const canonical = (g: number[]) => new URL(`http://[${g.map((x) => x.toString(16)).join(':')}]`).hostname.slice(1, -1);
  /** Outside the prefixes that carry an IPv4 address: ::/80, 64:ff9b::/96, 2002::/16 and 2001::/32. */
  const notMapped = groups.filter(
    (g) => !(g.slice(0, 5).every((x) => x === 0) || (g[0] === 0x64 && g[1] === 0xff9b) || g[0] === 0x2002 || (g[0] === 0x2001 && g[1] === 0)),
  );

  test.prop([notMapped, fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 4, maxLength: 4 })])(
    'every address of a /64 gets the key of the /64, in canonical form',
    (g, host) => {
      const key = `${canonical([...g.slice(0, 4), 0, 0, 0, 0])}/64`;
      expect(addressKey(canonical(g))).toBe(key);
      expect(addressKey(fullForm(g))).toBe(key);
      expect(addressKey(`${canonical([...g.slice(0, 4), ...host])}%eth0`)).toBe(key);
    },
  );

  const octets = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255));
  const hex16 = (high: number, low: number) => ((high << 8) | low).toString(16);
  const noise = fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 5, maxLength: 5 });
  /** Writes eight groups in any of the text forms a parser must take: full, compressed, uppercase, zone. */
  const textForm = fc.constantFrom(
    (g: number[]) => fullForm(g),
    (g: number[]) => canonical(g),
    (g: number[]) => canonical(g).toUpperCase(),
    (g: number[]) => `${canonical(g)}%eth0`,
    (g: number[]) => g.map((x) => x.toString(16)).join(':'),
  );

  test.prop([octets, noise, textForm])(
    'an address that carries an IPv4 address is keyed as that IPv4 address, in every text form',
    ([a, b, c, d], [n0 = 0, n1 = 0, n2 = 0, n3 = 0, n4 = 0], write) => {
      const ipv4 = `${a}.${b}.${c}.${d}`;
      const [hi, lo] = [(a << 8) | b, (c << 8) | d];
      const forms = [
        [0, 0, 0, 0, 0, 0xffff, hi, lo], // IPv4-mapped
        [0, 0, 0, 0, 0xffff, 0, hi, lo], // IPv4-translated (SIIT)
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo], // NAT64 well-known prefix
        [0x2002, hi, lo, n0, n1, n2, n3, n4], // 6to4: any subnet and host of the site's /48
        [0x2001, 0, n0, n1, n2, n3, hi ^ 0xffff, lo ^ 0xffff], // Teredo: any server, flags and port
      ];
      if (hi !== 0 || lo > 1) forms.push([0, 0, 0, 0, 0, 0, hi, lo]); // IPv4-compatible, but not :: or ::1
      for (const g of forms) expect(addressKey(write(g))).toBe(ipv4);
      expect(addressKey(`::ffff:${ipv4}`)).toBe(ipv4);
      expect(addressKey(`64:ff9b::${ipv4}`)).toBe(ipv4);
      expect(addressKey(`2002:${hex16(a, b)}:${hex16(c, d)}::1`)).toBe(ipv4);
      expect(addressKey(ipv4)).toBe(ipv4);
    },
  );

  test.prop([fc.oneof(fc.ipV4(), fc.ipV6(), fc.string())])('a key is its own key', (text) => {
    expect(addressKey(addressKey(text))).toBe(addressKey(text));
  });
});

describe('picking the client behind trusted proxies', () => {
  it.each<[string, string | undefined, string | undefined, number, string | undefined]>([
    ['no proxy trusted: the peer, whatever the header says', '203.0.113.9', '10.0.0.1', 0, '10.0.0.1'],
    ['one proxy: the address it saw', '198.51.100.1, 203.0.113.9', '10.0.0.1', 1, '203.0.113.9'],
    ['two proxies: the address the outer one saw', '198.51.100.1, 203.0.113.9, 10.0.0.2', '10.0.0.1', 2, '203.0.113.9'],
    ['fewer hops than proxies: the leftmost', '203.0.113.9', '10.0.0.1', 3, '203.0.113.9'],
    ['a trusted proxy but no header: the peer', undefined, '203.0.113.9', 1, '203.0.113.9'],
    ['no peer known (fetch): the nearest proxy is the peer', '198.51.100.1, 203.0.113.9', undefined, 1, '203.0.113.9'],
    ['no peer known, more proxies than hops: the leftmost', '203.0.113.9', undefined, 2, '203.0.113.9'],
    ['no peer and no header: nobody', undefined, undefined, 1, undefined],
    ['no peer and nothing trusted: nobody', '203.0.113.9', undefined, 0, undefined],
    ['the nearest entry malformed: the peer', '198.51.100.1, 203.0.113.9:x', '10.0.0.1', 1, '10.0.0.1'],
    ['the outer entry malformed: the address the inner proxy saw', '198.51.100.1, 203.0.113.9:x, 10.0.0.2', '10.0.0.1', 2, '10.0.0.2'],
    ['the entry left of the trusted ones malformed: never read', 'not an address, 203.0.113.9', '10.0.0.1', 1, '203.0.113.9'],
  ])('%s', (_, header, peer, trustProxies, client) => {
    expect(forwardedClient(peer, header, 'x-forwarded-for', trustProxies)).toBe(client);
  });

  it.each<[string, string, string[]]>([
    ['X-Forwarded-For with spaces and ports', ' 203.0.113.1:4711 ,[2001:db8::1]:80,2001:db8::2 , ', ['203.0.113.1', '2001:db8::1', '2001:db8::2']],
    ['X-Forwarded-For: unknown, zones, empty entries', 'UNKNOWN,, fe80::1%eth0 ,,', ['unknown', 'fe80::1%eth0']],
    ['Forwarded, RFC 7239 §7.4', 'for=192.0.2.43, for="[2001:db8:cafe::17]:4711";proto=https, for=unknown', ['192.0.2.43', '2001:db8:cafe::17', 'unknown']],
    ['Forwarded keys in any case, obfuscated ids', 'For="_gazonk";By=203.0.113.43', ['_gazonk']],
    ['Forwarded elements without for still count', 'proto=https;by=203.0.113.43, for=198.51.100.17', ['unknown', '198.51.100.17']],
    ['Forwarded quoted commas and escapes', 'x="a,b\\"c";for="192.0.2.1:80", for="19\\2.0.2.2";by=x', ['192.0.2.1', '192.0.2.2']],
  ])('reads %s', (_, value, hops) => {
    const header = value.includes('=') ? 'forwarded' : 'x-forwarded-for';
    expect(trustedHops(value, header, 16)).toEqual(hops);
  });
});

describe('Forwarded, parsed strictly (RFC 7239): reading stops at the first malformed element from the right', () => {
  // Each element sits between an address the client wrote (left) and the one the trusted proxy
  // appended (right): a valid one is read as a hop, a malformed one ends the chain there.
  const chain = (element: string) => trustedHops(`for=192.0.2.1, ${element}, for=198.51.100.7`, 'forwarded', 3);

  it.each<[string, string]>([
    ['for=192.0.2.43', '192.0.2.43'],
    ['for="192.0.2.43"', '192.0.2.43'],
    ['for="192.0.2.43:47011"', '192.0.2.43'],
    ['for="192.0.2.43:_port"', '192.0.2.43'],
    ['for="[2001:db8:cafe::17]"', '2001:db8:cafe::17'],
    ['for="[2001:DB8:CAFE::17]:4711"', '2001:DB8:CAFE::17'],
    ['for="[::ffff:192.0.2.1]"', '::ffff:192.0.2.1'],
    ['for=_hidden', '_hidden'],
    ['for="_hidden:_port"', '_hidden'],
    ['for=unknown', 'unknown'],
    ['for=UNKNOWN', 'unknown'],
    ['for="unknown:8080"', 'unknown'],
    ['proto=https;by=203.0.113.43', 'unknown'],
    ['for=192.0.2.60;proto=http;by=203.0.113.43', '192.0.2.60'],
    ['FOR=192.0.2.60;Proto=http', '192.0.2.60'],
    ['for=192.0.2.60 ;\tproto=http', '192.0.2.60'],
    [';for=192.0.2.60;;', '192.0.2.60'],
    ['for="19\\2.0.2.60"', '192.0.2.60'],
    ['x="a,b;c\\"d\\\\";for=192.0.2.60', '192.0.2.60'],
    ['x="";for=192.0.2.60', '192.0.2.60'],
    ['host="example.com:8080";for=192.0.2.60;ext="\xe9"', '192.0.2.60'],
  ])('reads %j as %s', (element, address) => {
    expect(chain(element)).toEqual(['192.0.2.1', address, '198.51.100.7']);
  });

  it.each([
    // quoted strings
    'for="192.0.2.60',
    'for=192.0.2.60;x="',
    'for="[2001:db8::1]";x="',
    'for="192.0.2.60\\"',
    'for="192.0.2.60"x',
    'for="192.0.2.60""',
    'for="192.0.2.60\x01"',
    'for="192.0.2.60\\\x01"',
    'for="192.0.2.60\x7f"',
    // tokens and pairs
    'for',
    'for=',
    '=192.0.2.60',
    'for =192.0.2.60',
    'for= 192.0.2.60',
    'for=192.0.2.60 x',
    'for==192.0.2.60',
    'for=192.0.2.60=',
    'f(r=192.0.2.60',
    'for=192.0.2.60;x',
    'for=192.0.2.60;x=@',
    'for=192.0.2.60;x=a\\b',
    // a parameter twice
    'for=192.0.2.60;for=192.0.2.61',
    'for=192.0.2.60;For=192.0.2.61',
    'by=a;by=b;for=192.0.2.60',
    // nodes
    'for=192.0.2.60:80',
    'for=example.com',
    'for=01.2.3.4',
    'for=256.1.1.1',
    'for=1.2.3',
    'for="2001:db8::1"',
    'for="[2001:db8::1"',
    'for="[2001:db8::1]80"',
    'for="[2001:db8::1]:"',
    'for="[fe80::1%eth0]"',
    'for="[192.0.2.60]"',
    'for="[v1.x]"',
    'for="192.0.2.60:"',
    'for="192.0.2.60:123456"',
    'for="192.0.2.60:80:80"',
    'for="192.0.2.60:-1"',
    'for=_',
    'for="_a b"',
    'for="_a:"',
    'for=unknown_',
    // a for value too long
    `for="_${'a'.repeat(MAX_ADDRESS_LENGTH)}"`,
  ])('stops at %j', (element) => {
    expect(chain(element)).toEqual(['198.51.100.7']);
  });

  it('takes a for value of MAX_ADDRESS_LENGTH characters, not one more, wherever it stands', () => {
    const element = (length: number) => `for=_${'a'.repeat(length - 1)};proto=https`;
    const id = `_${'a'.repeat(MAX_ADDRESS_LENGTH - 1)}`;
    expect(trustedHops(element(MAX_ADDRESS_LENGTH), 'forwarded', 1)).toEqual([id]);
    expect(trustedHops(`x,${element(MAX_ADDRESS_LENGTH)}`, 'forwarded', 1)).toEqual([id]);
    expect(trustedHops(element(MAX_ADDRESS_LENGTH + 1), 'forwarded', 1)).toEqual([]);
    expect(trustedHops(`x,${element(MAX_ADDRESS_LENGTH + 1)}`, 'forwarded', 1)).toEqual([]);
  });

  // Issue 23, item 20: a proxy that copies the client's Host into `host=` (HAProxy `option forwarded
  // host`, nginx `;host=$host`) writes a well-formed element whose length the client chooses. Dropping
  // it as too long gave the client the peer's key (the proxy's own), out of its spent one.
  it("keeps a trusted proxy's element whatever the length of the host the client chose", () => {
    const forwarded = 'for=203.0.113.7;host="' + 'a'.repeat(1100) + '.example";proto=https';
    expect(resolveClientAddress('10.0.0.2', { forwarded }, { trustProxies: 1, forwardedHeader: 'forwarded' })).toBe('203.0.113.7');
    for (const host of ['a'.repeat(100_000), `"${'a,b;c\\"'.repeat(20_000)}"`]) {
      expect(trustedHops(`for="x, for=192.0.2.1;host=${host}, for=198.51.100.7;by=${host}`, 'forwarded', 2)).toEqual(['192.0.2.1', '198.51.100.7']);
    }
  });

  it('skips empty elements, and reads no further than trustProxies entries from the right', () => {
    expect(trustedHops(' , for=192.0.2.1,, ,for=192.0.2.2 , ', 'forwarded', 16)).toEqual(['192.0.2.1', '192.0.2.2']);
    expect(trustedHops('for="x, for=192.0.2.1, for=192.0.2.2', 'forwarded', 2)).toEqual(['192.0.2.1', '192.0.2.2']);
    expect(trustedHops('for="x, for=192.0.2.1, for=192.0.2.2', 'forwarded', 3)).toEqual(['192.0.2.1', '192.0.2.2']);
  });

  it('reads a hostile header of millions of characters in one pass, returning what the trusted entries say', () => {
    const trusted = ', for=192.0.2.1';
    for (const filler of [',', '"', '\\"', 'for="x', ' ']) {
      expect(trustedHops(filler.repeat(1_000_000) + trusted, 'forwarded', 1)).toEqual(['192.0.2.1']);
      expect(trustedHops(filler.repeat(1_000_000) + trusted, 'forwarded', 16)).toEqual(['192.0.2.1']);
      expect(trustedHops(filler.repeat(1_000_000) + trusted.replace(', for=', ', '), 'x-forwarded-for', 16)).toEqual(['192.0.2.1']);
    }
  });

  test.prop([fc.string(), fc.string(), fc.string({ minLength: MAX_ADDRESS_LENGTH + 1, maxLength: MAX_ADDRESS_LENGTH + 40 })])(
    'X-Forwarded-For: what lies left of the last trustProxies × (MAX_ADDRESS_LENGTH + 1) characters is never read',
    (left, other, tail) => {
      expect(trustedHops(left + tail, 'x-forwarded-for', 1)).toEqual(trustedHops(other + tail, 'x-forwarded-for', 1));
    },
  );
});

describe('X-Forwarded-For: reading stops at the first entry from the right that is no address', () => {
  const chain = (entry: string) => trustedHops(`192.0.2.1, ${entry}, 198.51.100.7`, 'x-forwarded-for', 3);

  it.each<[string, string]>([
    ['192.0.2.60', '192.0.2.60'],
    ['192.0.2.60:8080', '192.0.2.60'],
    ['2001:db8::1', '2001:db8::1'],
    ['[2001:db8::1]', '2001:db8::1'],
    ['[2001:db8::1]:443', '2001:db8::1'],
    ['::ffff:192.0.2.60', '::ffff:192.0.2.60'],
    ['fe80::1%eth0', 'fe80::1%eth0'],
    ['Unknown', 'unknown'],
  ])('reads %j as %s', (entry, address) => {
    expect(chain(entry)).toEqual(['192.0.2.1', address, '198.51.100.7']);
  });

  it.each(['example.com', '01.2.3.4', '192.0.2.60:', '192.0.2.60:http', '192.0.2.60:123456', '[2001:db8::1', '[2001:db8::1]x', '[192.0.2.60]', '192.0.2.60 192.0.2.61', '"192.0.2.60"', 'for=192.0.2.60', '_hidden', 'fe80::1%', 'fe80::1%eth 0', '[fe80::1%"]', 'a'.repeat(MAX_ADDRESS_LENGTH + 1)])(
    'stops at %j',
    (entry) => {
      expect(chain(entry)).toEqual(['198.51.100.7']);
    },
  );
});

describe('resolveClientAddress', () => {
  it('resolves as the middleware does, from Fetch Headers or Node headers', () => {
    const node = { 'x-forwarded-for': ['198.51.100.1', '203.0.113.7'] };
    const fetchHeaders = new Headers({ forwarded: 'for=198.51.100.1, for="[2001:db8::7]:4711"' });
    expect(resolveClientAddress('10.0.0.2', node, { trustProxies: 1 })).toBe('203.0.113.7');
    expect(resolveClientAddress('10.0.0.2', node, { trustProxies: 2 })).toBe('198.51.100.1');
    expect(resolveClientAddress('10.0.0.2', node)).toBe('10.0.0.2');
    expect(resolveClientAddress('10.0.0.2', fetchHeaders, { trustProxies: 1, forwardedHeader: 'forwarded' })).toBe('2001:db8::7');
    expect(resolveClientAddress(undefined, {})).toBeUndefined();
  });

  it('checks its options as the middleware does', () => {
    expect(() => resolveClientAddress('10.0.0.2', {}, { trustProxies: 17 })).toThrow(
      rangeError('ratekeeper: `trustProxies` must be an integer from 0 to 16, got 17'),
    );
    expect(() => resolveClientAddress('10.0.0.2', null as never)).toThrow(TypeError);
  });
});
