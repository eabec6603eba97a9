// The import graph between the store folders (issue 24): the store layer (src/store) imports no
// engine, and the PostgreSQL engine (src/postgres, src/postgres.ts) imports nothing of Redis's.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** Every TypeScript file under `path` (or `path` itself), relative to the root. */
function files(path: string): string[] {
  const full = join(root, path);
  if (full.endsWith('.ts')) return [path];
  return readdirSync(full, { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith('.ts'))
    .map((name) => join(path, name));
}

/** The src-relative modules a file imports (or re-exports from), resolved. */
function imports(file: string): string[] {
  const text = readFileSync(join(root, file), 'utf8');
  const specifiers = [...text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+'([^']+)'/g)].map((match) => match[1]!);
  return specifiers.filter((specifier) => specifier.startsWith('.')).map((specifier) => relative(root, resolve(root, dirname(file), specifier)));
}

describe('the store folders import in one direction', () => {
  test('nothing under src/postgres, nor src/postgres.ts, imports src/redis', () => {
    const found = [...files('src/postgres'), 'src/postgres.ts'].flatMap((file) => imports(file).filter((target) => target === 'src/redis' || target.startsWith('src/redis/')).map((target) => `${file} -> ${target}`));
    expect(found).toEqual([]);
  });

  test('src/store imports neither engine', () => {
    const found = files('src/store').flatMap((file) => imports(file).filter((target) => /^src\/(redis|postgres)(\/|$)/.test(target)).map((target) => `${file} -> ${target}`));
    expect(found).toEqual([]);
  });

  test('the check reads imports (it finds src/redis.ts importing src/redis)', () => {
    expect(imports('src/redis.ts')).toContain('src/redis/redis-rate-limiter');
  });
});
