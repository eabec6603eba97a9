// src/http/ip-address.ts (addressKey: IPv6 /64, IPv4-mapped addresses) and src/http/forwarded.ts.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { addressKey } from '../../src/http';
import { forwardedHops, pickClient } from '../../src/http/forwarded';

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
    ['::192.0.2.1', '::/64'],
    ['64:ff9b::198.51.100.7', '64:ff9b::/64'],
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
    expect(() => addressKey(7 as never)).toThrow(new TypeError('ratekeeper: `address` must be a string, got 7'));
  });

  const groups = fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 8, maxLength: 8 });
  const fullForm = (g: number[]) => g.map((x) => x.toString(16).padStart(4, '0').toUpperCase()).join(':');
  /** The WHATWG URL parser canonicalizes IPv6 the RFC 5952 way: an independent oracle. */
  const canonical = (g: number[]) => new URL(`http://[${g.map((x) => x.toString(16)).join(':')}]`).hostname.slice(1, -1);
  const notMapped = groups.filter((g) => !(g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff));

  test.prop([notMapped, fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 4, maxLength: 4 })])(
    'every address of a /64 gets the key of the /64, in canonical form',
    (g, host) => {
      const key = `${canonical([...g.slice(0, 4), 0, 0, 0, 0])}/64`;
      expect(addressKey(canonical(g))).toBe(key);
      expect(addressKey(fullForm(g))).toBe(key);
      expect(addressKey(`${canonical([...g.slice(0, 4), ...host])}%eth0`)).toBe(key);
    },
  );

  test.prop([fc.ipV4()])('an IPv4-mapped address is its IPv4 address', (ipv4) => {
    expect(addressKey(`::ffff:${ipv4}`)).toBe(ipv4);
    expect(addressKey(ipv4)).toBe(ipv4);
  });

  test.prop([fc.oneof(fc.ipV4(), fc.ipV6(), fc.string())])('a key is its own key', (text) => {
    expect(addressKey(addressKey(text))).toBe(addressKey(text));
  });
});

describe('picking the client behind trusted proxies', () => {
  const xff = (value: string | undefined) => forwardedHops(value, 'x-forwarded-for');

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
  ])('%s', (_, header, peer, trustProxies, client) => {
    expect(pickClient(peer, xff(header), trustProxies)).toBe(client);
  });

  it.each<[string, string, string[]]>([
    ['X-Forwarded-For with spaces and ports', ' 203.0.113.1:4711 ,[2001:db8::1]:80,2001:db8::2 , ', ['203.0.113.1', '2001:db8::1', '2001:db8::2']],
    ['Forwarded, RFC 7239 §7.4', 'for=192.0.2.43, for="[2001:db8:cafe::17]:4711";proto=https, for=unknown', ['192.0.2.43', '2001:db8:cafe::17', 'unknown']],
    ['Forwarded keys in any case, obfuscated ids', 'For="_gazonk";By=203.0.113.43', ['_gazonk']],
    ['Forwarded elements without for still count', 'proto=https;by=203.0.113.43, for=198.51.100.17', ['unknown', '198.51.100.17']],
    ['Forwarded quoted commas and escapes', 'for="a,b\\"c";by=x, for="192.0.2.1:80"', ['a,b"c', '192.0.2.1']],
  ])('reads %s', (_, value, hops) => {
    const header = value.includes('=') ? 'forwarded' : 'x-forwarded-for';
    expect(forwardedHops(value, header)).toEqual(hops);
  });
});
