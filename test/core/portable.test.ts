import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const src = resolve(dirname(fileURLToPath(import.meta.url)), '../../src');

/** Every module the entry reaches, by following its import and export-from statements. */
function reachable(entry: string): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const visit = (file: string) => {
    if (graph.has(file)) return;
    const code = readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\//g, ''); // JSDoc examples import 'ratekeeper'
    const specifiers = [...code.matchAll(/(?:import|export)\s[^'"]*?from\s+'([^']+)'/g)].map((m) => m[1] as string);
    graph.set(file, specifiers);
    for (const specifier of specifiers) if (specifier.startsWith('.')) visit(`${resolve(dirname(file), specifier)}.ts`);
  };
  visit(entry);
  return graph;
}

it('the core entry imports nothing outside the package, so it runs in browsers, workers and edge runtimes', () => {
  const graph = reachable(resolve(src, 'index.ts'));
  expect(graph.size).toBeGreaterThan(8);
  const outside = [...graph].flatMap(([file, specifiers]) =>
    specifiers.filter((s) => !s.startsWith('.')).map((s) => `${file.slice(src.length)} imports ${s}`),
  );
  expect(outside).toEqual([]);
});
