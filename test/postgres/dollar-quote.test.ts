// The migration's function bodies are dollar-quoted after the schema name is written into them: the
// quote chosen must occur nowhere in the text, whatever the name holds (PostgreSQL would end a body
// at the first occurrence of its tag).
import { fc, test } from '@fast-check/vitest';
import { expect } from 'vitest';
import { dollarQuoted, QUOTE } from '../../src/postgres/sql/dollar-quote';

const piece = fc.constantFrom('$', 'rk', '1', '2', '$$', '$rk$', '$rk1$', 'a', '"', '\\', 'fn');
const body = fc.array(piece, { maxLength: 12 }).map((parts) => parts.join(''));

test.prop([fc.array(body, { minLength: 1, maxLength: 4 })])('each body is quoted by a tag that occurs nowhere in the text it quotes', (bodies) => {
  const text = bodies.map((b) => `${QUOTE}${b}${QUOTE}`).join(';');
  const quoted = dollarQuoted(text);
  const tag = /^(\$rk\d*\$)/.exec(quoted)![1]!;
  expect(quoted).toBe(bodies.map((b) => `${tag}${b}${tag}`).join(';'));
  for (const b of bodies) expect(b.includes(tag)).toBe(false);
});
