import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

// Facts the docs state about the code, checked against the code, so that a new error code, a new
// degraded reason or a moved file cannot leave a page behind (each of these once did).

const pages = ['README.md', 'SECURITY.md', ...readdirSync('docs').filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
const read = (path: string) => readFileSync(path, 'utf8');
/** A page without its fenced code blocks: prose and tables only. */
const prose = (path: string) => read(path).replace(/^```[^\n]*\n[\s\S]*?^```$/gm, '');
const sources = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? sources(join(dir, entry.name)) : entry.name.endsWith('.ts') ? [join(dir, entry.name)] : [],
  );

describe('the README errors table', () => {
  const codes = [...(/export type ErrorCode =([^;]+);/.exec(read('src/core/errors.ts'))?.[1] ?? '').matchAll(/'(ERR_\w+)'/g)].map((m) => m[1] as string);
  /** Every error class in src with a literal `code`: its `name` and that code. */
  const direct = sources('src').flatMap((file) =>
    [...read(file).matchAll(/(abstract )?class (\w+) extends Error \{\s*(?:override readonly name = '\w+';\s*)?readonly code = '(ERR_\w+)'/g)].map((m) => ({ name: m[2] as string, code: m[3] as string, abstract: m[1] !== undefined })),
  );
  /** And every class naming itself under a base that holds the code (the stores' timeout errors). */
  const classes = [
    ...direct.filter((found) => !found.abstract),
    ...sources('src').flatMap((file) =>
      [...read(file).matchAll(/class (\w+) extends (\w+) \{\s*override readonly name = '\w+';/g)].flatMap((m) => {
        const base = direct.find(({ name }) => name === m[2]);
        return base === undefined ? [] : [{ name: m[1] as string, code: base.code }];
      }),
    ),
  ];
  const rows = new Map(
    [...read('README.md').matchAll(/^\| `(ERR_\w+)` \| ([^|]+) \|/gm)].map((m) => [m[1] as string, m[2] as string]),
  );

  it('lists every ErrorCode', () => {
    expect(codes.length).toBeGreaterThan(8);
    expect(codes.filter((code) => !rows.has(code))).toEqual([]);
    expect([...rows.keys()].filter((code) => !codes.includes(code))).toEqual([]);
  });

  it('names every error class under its code', () => {
    expect(classes.map(({ name }) => name)).toEqual(expect.arrayContaining(['ClosedError', 'RedisTimeoutError', 'PostgresTimeoutError']));
    expect(classes.filter(({ name, code }) => !rows.get(code)?.includes(`\`${name}\``))).toEqual([]);
  });
});

describe('the docs', () => {
  it('list every degraded reason wherever they list them', () => {
    const reasons = [...(/export type DegradedReason =([^;]+);/.exec(read('src/core/decision.ts'))?.[1] ?? '').matchAll(/'([\w-]+)'/g)].map((m) => m[1] as string);
    expect(reasons).toContain('queue-full');
    // A list is a paragraph or table row naming the table-full reason and both outage reasons.
    const lists = pages.flatMap((page) =>
      prose(page)
        .split(/\n\s*\n|\n(?=\|)/)
        .filter((part) => ['key-table-full', 'store-error', 'store-timeout'].every((reason) => part.includes(`'${reason}'`)))
        .map((part) => ({ page, part })),
    );
    expect(lists.length).toBeGreaterThan(1);
    expect(lists.filter(({ part }) => !reasons.every((reason) => part.includes(`'${reason}'`))).map(({ page, part }) => `${page}: ${part}`)).toEqual([]);
  });

  it('keep each table whole: a header and its separator, no blank line cutting off rows', () => {
    const headless = pages.flatMap((page) =>
      prose(page)
        .split(/\n\s*\n/)
        .map((block) => block.split('\n').filter((line) => line.startsWith('|')))
        .filter((rows) => rows.length > 0 && !/^\|\s*:?-{3}/.test(rows[1] ?? ''))
        .map((rows) => `${page}: ${rows[0]}`),
    );
    expect(headless).toEqual([]);
  });

  it('name only files the repository has', () => {
    const named = pages.flatMap((page) =>
      [...prose(page).matchAll(/(?<![\w./-])((?:src|test|bench|docs|examples|scripts)\/[\w./-]+\.\w+|[A-Z][\w-]*\.md)\b/g)].map((m) => ({ page, file: m[1] as string })),
    );
    expect(named.length).toBeGreaterThan(20);
    const missing = named.filter(({ file }) => !existsSync(file) && !existsSync(join('docs', file)));
    expect(missing.map(({ page, file }) => `${page}: ${file}`)).toEqual([]);
  });
});
