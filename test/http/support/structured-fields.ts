// A strict RFC 9651 (Structured Field Values for HTTP) parser, written from §4.2, so that tests can
// prove every RateLimit field parses as the type its draft says. It throws SyntaxError on anything
// the RFC says to fail on.

export type BareItem = number | string | boolean | { readonly token: string } | { readonly bytes: string } | { readonly date: number };
export type Parameters = Map<string, BareItem>;
export interface Item {
  readonly value: BareItem;
  readonly params: Parameters;
}
export interface InnerList {
  readonly items: Item[];
  readonly params: Parameters;
}
export type Member = Item | InnerList;

class Input {
  constructor(
    private readonly text: string,
    public pos = 0,
  ) {}
  get done(): boolean {
    return this.pos >= this.text.length;
  }
  peek(): string {
    return this.text[this.pos] ?? '';
  }
  take(): string {
    return this.text[this.pos++] ?? '';
  }
  skipSpaces(): void {
    while (this.peek() === ' ') this.pos++;
  }
  skipOws(): void {
    while (this.peek() === ' ' || this.peek() === '\t') this.pos++;
  }
  fail(what: string): never {
    throw new SyntaxError(`${what} at ${this.pos} in ${JSON.stringify(this.text)}`);
  }
}

function whole<T>(text: string, parse: (input: Input) => T): T {
  const input = new Input(text);
  input.skipSpaces();
  const value = parse(input);
  input.skipSpaces();
  if (!input.done) input.fail('trailing characters');
  return value;
}

/** Parses a field value as an sf-list (§4.2.1). */
export function parseList(text: string): Member[] {
  return whole(text, (input) => {
    const members: Member[] = [];
    while (!input.done) {
      members.push(parseMember(input));
      if (!separator(input)) break;
    }
    return members;
  });
}

/** Parses a field value as an sf-dictionary (§4.2.2); keys keep their order. */
export function parseDictionary(text: string): Map<string, Member> {
  return whole(text, (input) => {
    const members = new Map<string, Member>();
    while (!input.done) {
      const key = parseKey(input);
      if (input.peek() === '=') {
        input.take();
        members.set(key, parseMember(input));
      } else {
        members.set(key, { value: true, params: parseParameters(input) });
      }
      if (!separator(input)) break;
    }
    return members;
  });
}

/** Parses a field value as an sf-item (§4.2.3). */
export function parseItem(text: string): Item {
  return whole(text, parseSingleItem);
}

/** Consumes `OWS "," OWS` between members; false at the end of input. A trailing comma fails. */
function separator(input: Input): boolean {
  input.skipOws();
  if (input.done) return false;
  if (input.take() !== ',') input.fail('expected ","');
  input.skipOws();
  if (input.done) input.fail('trailing ","');
  return true;
}

function parseMember(input: Input): Member {
  if (input.peek() !== '(') return parseSingleItem(input);
  input.take();
  const items: Item[] = [];
  for (;;) {
    input.skipSpaces();
    if (input.peek() === ')') {
      input.take();
      return { items, params: parseParameters(input) };
    }
    items.push(parseSingleItem(input));
    if (input.peek() !== ' ' && input.peek() !== ')') input.fail('expected " " or ")" in inner list');
  }
}

function parseSingleItem(input: Input): Item {
  return { value: parseBareItem(input), params: parseParameters(input) };
}

function parseParameters(input: Input): Parameters {
  const params: Parameters = new Map();
  while (input.peek() === ';') {
    input.take();
    input.skipSpaces();
    const key = parseKey(input);
    let value: BareItem = true;
    if (input.peek() === '=') {
      input.take();
      value = parseBareItem(input);
    }
    params.set(key, value);
  }
  return params;
}

function parseKey(input: Input): string {
  if (!/[a-z*]/.test(input.peek())) input.fail('a key must start with a-z or "*"');
  let key = '';
  while (/[a-z0-9_\-.*]/.test(input.peek()) && !input.done) key += input.take();
  return key;
}

function parseBareItem(input: Input): BareItem {
  const c = input.peek();
  if (c === '-' || /[0-9]/.test(c)) return parseNumber(input);
  if (c === '"') return parseString(input);
  if (c === '*' || /[A-Za-z]/.test(c)) return parseToken(input);
  if (c === ':') return parseBytes(input);
  if (c === '?') return parseBoolean(input);
  if (c === '@') {
    input.take();
    const date = parseNumber(input);
    if (!Number.isInteger(date)) input.fail('a date must be an integer');
    return { date };
  }
  return input.fail('unknown bare item');
}

function parseNumber(input: Input): number {
  let sign = 1;
  if (input.peek() === '-') {
    input.take();
    sign = -1;
  }
  if (!/[0-9]/.test(input.peek())) input.fail('expected a digit');
  let digits = '';
  let decimal = false;
  while (!input.done && /[0-9.]/.test(input.peek())) {
    const c = input.take();
    if (c === '.') {
      if (decimal || digits.length > 12) input.fail('malformed decimal');
      decimal = true;
    }
    digits += c;
    if (!decimal && digits.length > 15) input.fail('an integer has at most 15 digits');
    if (decimal && digits.length > 16) input.fail('a decimal is too long');
  }
  if (decimal) {
    const fraction = digits.length - digits.indexOf('.') - 1;
    if (fraction === 0 || fraction > 3) input.fail('a decimal needs 1 to 3 fraction digits');
  }
  return sign * Number(digits);
}

function parseString(input: Input): string {
  input.take();
  let value = '';
  for (;;) {
    if (input.done) input.fail('unterminated string');
    const c = input.take();
    if (c === '"') return value;
    if (c === '\\') {
      const next = input.take();
      if (next !== '"' && next !== '\\') input.fail('bad escape');
      value += next;
    } else if (c < ' ' || c > '~') {
      input.fail('a string holds printable ASCII only');
    } else {
      value += c;
    }
  }
}

function parseToken(input: Input): { token: string } {
  let token = input.take();
  while (!input.done && /[!#$%&'*+\-.^_`|~0-9A-Za-z:/]/.test(input.peek())) token += input.take();
  return { token };
}

function parseBytes(input: Input): { bytes: string } {
  input.take();
  let bytes = '';
  while (input.peek() !== ':') {
    if (input.done || !/[A-Za-z0-9+/=]/.test(input.peek())) input.fail('bad byte sequence');
    bytes += input.take();
  }
  input.take();
  return { bytes };
}

function parseBoolean(input: Input): boolean {
  input.take();
  const c = input.take();
  if (c !== '0' && c !== '1') input.fail('a boolean is ?0 or ?1');
  return c === '1';
}
