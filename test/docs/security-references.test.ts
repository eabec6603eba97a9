import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

// SECURITY.md shows each defence by naming tests: `test/file.ts` › "a test or describe name". A
// renamed or deleted test would leave the threat model pointing at nothing, so every name quoted
// after a test file must still be in that file.

const security = readFileSync('SECURITY.md', 'utf8');

/** Each "Shown by" paragraph as one line: its file references and the names quoted after them. */
function shownBy(text: string): string[] {
  return text
    .split(/\n\s*\n/)
    .filter((paragraph) => paragraph.includes('**Shown by**'))
    .map((paragraph) => paragraph.replace(/\s+/g, ' '));
}

/** The test files a paragraph refers to, each with the names quoted after it (up to the next file). */
function references(paragraph: string): { file: string; names: string[] }[] {
  const found: { file: string; names: string[] }[] = [];
  for (const token of paragraph.matchAll(/`([^`]+\.ts)`|"([^"]+)"/g)) {
    const [, file, name] = token;
    if (file !== undefined) found.push({ file, names: [] });
    else if (name !== undefined) found.at(-1)?.names.push(name);
  }
  return found.filter(({ file }) => file.startsWith('test/'));
}

describe('SECURITY.md', () => {
  const paragraphs = shownBy(security);

  it('has a "Shown by" for each of its threats', () => {
    expect(paragraphs.length).toBe(security.match(/^### \d+\./gm)?.length);
  });

  it.each(paragraphs.flatMap(references))('$file holds every test SECURITY.md names in it', ({ file, names }) => {
    expect(existsSync(file), `${file} exists`).toBe(true);
    const source = readFileSync(file, 'utf8').replace(/\s+/g, ' ');
    expect(names.filter((name) => !source.includes(name))).toEqual([]);
  });
});
