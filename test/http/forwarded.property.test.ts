// src/http/forwarded.ts, fuzzed: the law behind `trustProxies`. A client may write anything in a
// forwarding header; each trusted proxy then appends its own entry to the right (in the same header
// line or a line of its own, which servers join with ", "). Only those entries decide the key.
import { fc, test } from '@fast-check/vitest';
import { describe, expect } from 'vitest';
import type { Allowed } from '../../src/index';
import { addressKey, resolveClientAddress, withRateLimit, type ForwardedHeader } from '../../src/http';
import { forwardedClient } from '../../src/http/forwarded';

/** A proxy's entry: its text and the address it names. */
interface Entry {
  readonly text: string;
  readonly address: string;
}

const PIECES = ['"', '"', ',', ';', '\\', '=', 'for', 'For=', '[', ']', ' ', '\t', ':', 'unknown', '_x', '198.51.100.1', '"[2001:db8::1]"', 'x', '\x7f', '\xff'];

/** What a client writes: any text, text of any byte (0 to 255), or text built from the pieces a parser cares about. */
const anyText = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 100 }),
  fc.string({ unit: fc.nat(255).map((code) => String.fromCharCode(code)), maxLength: 100 }),
  fc.array(fc.constantFrom(...PIECES), { maxLength: 40 }).map((pieces) => pieces.join('')),
);

const port = fc.oneof(fc.nat(65535).map(String), fc.stringMatching(/^_[A-Za-z0-9._-]{1,8}$/));
const obfuscated = fc.stringMatching(/^_[A-Za-z0-9._-]{1,12}$/);
/** Parameters a proxy may add beside `for`, each name once; `ext` has a quoted value holding the characters that matter. */
const parameters = fc.uniqueArray(
  fc.oneof(
    fc.constantFrom('proto=https', 'by=203.0.113.43', 'by="[2001:db8::17]:80"', 'host="example.com:8080"'),
    fc.string({ unit: fc.constantFrom('a', ',', ';', '"', '\\', ' ', '='), maxLength: 12 }).map((text) => `ext="${text.replace(/["\\]/g, '\\$&')}"`),
  ),
  { selector: (pair) => pair.slice(0, pair.indexOf('=')), maxLength: 3 },
);

/** A `for` node as a proxy writes it, and the address it names. */
const forNode = fc.oneof(
      fc.tuple(fc.ipV4(), fc.option(port), fc.boolean()).map(([ip, p, quote]) => ({
        node: p === null ? (quote ? `"${ip}"` : ip) : `"${ip}:${p}"`,
        address: ip,
      })),
      fc.tuple(fc.ipV6(), fc.option(port)).map(([ip, p]) => ({ node: `"[${ip}]${p === null ? '' : `:${p}`}"`, address: ip })),
      fc.tuple(obfuscated, fc.option(port)).map(([id, p]) => ({ node: p === null ? id : `"${id}:${p}"`, address: id })),
  fc.constantFrom('unknown', 'UNKNOWN', '"unknown:80"').map((node) => ({ node, address: 'unknown' })),
);

/** An RFC 7239 element as a proxy writes it, `for` among other parameters. */
const forwardedEntry: fc.Arbitrary<Entry> = fc
  .tuple(forNode, parameters, fc.nat(3))
  .map(([{ node, address }, others, at]) => ({ text: [...others.slice(0, at), `for=${node}`, ...others.slice(at)].join(';'), address }));

/** Text of any length made of what an HTTP header value may carry (HTAB, SP to `~`, and 0x80 to 0xff): what a client can put in its `Host`. */
const headerText = fc
  .tuple(fc.string({ unit: fc.oneof(fc.integer({ min: 0x20, max: 0x7e }), fc.integer({ min: 0x80, max: 0xff }), fc.constant(9)).map((code) => String.fromCharCode(code)), maxLength: 20 }), fc.nat(300))
  .map(([text, times]) => text.repeat(times));

/** A value as a proxy writes it: a token when it is one, else a quoted-string with `"` and `\` escaped (RFC 7239 §4). */
const written = (text: string) => (/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(text) ? text : `"${text.replace(/["\\]/g, '\\$&')}"`);

/**
 * The parameters beside `for` that a client chooses, each of any length: `host` copied from its
 * `Host`, `proto`, `by`, and an extension of any name (RFC 7239 §5.5), each written well-formed.
 */
const clientChosen = fc.uniqueArray(
  fc.oneof(
    headerText.map((text) => `host=${written(text)}`),
    headerText.map((text) => `proto=${written(text)}`),
    headerText.map((text) => `by=${written(text)}`),
    fc.tuple(fc.stringMatching(/^[a-eg-z][a-z0-9-]{0,10}$/), headerText).map(([name, text]) => `${name}=${written(text)}`),
  ),
  { selector: (pair) => pair.slice(0, pair.indexOf('=')).toLowerCase(), maxLength: 4 },
);

/** An element whose `for` a proxy wrote, beside parameters whose values the client chose. */
const elementWithClientValues: fc.Arbitrary<Entry> = fc
  .tuple(forNode, clientChosen, fc.nat(4))
  .map(([{ node, address }, others, at]) => ({ text: [...others.slice(0, at), `for=${node}`, ...others.slice(at)].join(';'), address }));

/** An X-Forwarded-For entry as a proxy writes it. */
const xffEntry: fc.Arbitrary<Entry> = fc.oneof(
  fc.tuple(fc.ipV4(), fc.option(fc.nat(65535))).map(([ip, p]) => ({ text: p === null ? ip : `${ip}:${p}`, address: ip })),
  fc.tuple(fc.ipV6(), fc.option(fc.nat(65535))).map(([ip, p]) => ({ text: p === null ? ip : `[${ip}]:${p}`, address: ip })),
  fc.constant({ text: 'unknown', address: 'unknown' }),
);

/** The proxies' entries (nearest last) and how many of them are trusted. */
const proxies = (entry: fc.Arbitrary<Entry>) =>
  fc.array(entry, { minLength: 1, maxLength: 5 }).chain((entries) => fc.tuple(fc.constant(entries), fc.integer({ min: 1, max: entries.length })));

/** The attacks of issue 17, behind one proxy that saw 203.0.113.7: always among the runs. */
const seen = { text: 'for=203.0.113.7', address: '203.0.113.7' };
const ATTACKS = ['for="x0', 'for=198.51.100.1;x="', 'for="[2001:db8:1::1]";x="'].map((client): [string, [Entry[], number]] => [client, [[seen], 1]]);

const HEADERS: [ForwardedHeader, fc.Arbitrary<Entry>, [string, [Entry[], number]][]][] = [
  ['forwarded', forwardedEntry, ATTACKS],
  ['x-forwarded-for', xffEntry, []],
];

describe.each(HEADERS)('%s', (header, entry, attacks) => {
  test.prop([fc.option(anyText), proxies(entry)], { examples: attacks })(
    'whatever the client writes to the left, the client is the address the outermost trusted proxy saw',
    (client, [entries, trusted]) => {
      const appended = entries.map((e) => e.text).join(', ');
      const value = client === null ? appended : `${client}, ${appended}`;
      const expected = entries[entries.length - trusted]?.address;
      expect(forwardedClient('10.0.0.1', value, header, trusted)).toBe(expected);
    },
  );

  test.prop([fc.option(anyText), proxies(entry), fc.boolean()], { examples: attacks.flatMap(([client, chain]) => [false, true].map((ownLine): [string, [Entry[], number], boolean] => [client, chain, ownLine])) })(
    'through the middleware, one header line or two, the key is addressKey of that address',
    async (client, [entries, trusted], ownLine) => {
      const appended = entries.map((e) => e.text).join(', ');
      const headers = new Headers();
      try {
        if (client !== null && !ownLine) headers.append(header, `${client}, ${appended}`);
        else if (client !== null) headers.append(header, client);
      } catch {
        fc.pre(false); // not a value a header can hold (a character above 255, CR, LF, NUL)
      }
      if (client === null || ownLine) headers.append(header, appended);
      const keys: string[] = [];
      const decision: Allowed = { allowed: true, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 1 };
      const limiter = { tryAcquire: (key: string) => (keys.push(key), decision) };
      const handler = withRateLimit({ limiter, trustProxies: trusted, forwardedHeader: header, clientAddress: () => '10.0.0.1' }, () => new Response('ok'));
      await handler(new Request('http://api.test/', { headers }));
      expect(keys).toEqual([addressKey(entries[entries.length - trusted]?.address ?? '')]);
    },
  );
});

describe('Forwarded: only the proxy writes what is counted', () => {
  // Issue 23, item 20: an element whose `host` the client chose is the client's to lengthen; it was
  // dropped past 1024 characters, and the key fell back to the proxy's own address.
  test.prop([fc.option(anyText), fc.array(elementWithClientValues, { minLength: 1, maxLength: 3 }), fc.nat(2)])(
    'an element with a valid for= names the for address, whatever values of any length the other parameters hold',
    (client, entries, pick) => {
      const trusted = 1 + (pick % entries.length);
      const appended = entries.map((e) => e.text).join(', ');
      const forwarded = client === null ? appended : `${client}, ${appended}`;
      const expected = entries[entries.length - trusted]?.address;
      expect(resolveClientAddress('10.0.0.1', { forwarded }, { trustProxies: trusted, forwardedHeader: 'forwarded' })).toBe(expected);
    },
  );
});
