// Size budgets for what a browser app actually ships: the built ESM core, minified and gzipped,
// and a tree-shaken bundle that uses only the keyed limiter and one algorithm.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';
import { beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));
/**
 * Budgets in bytes of gzip output (1 KB = 1024 bytes): they stop the bundles from growing unnoticed.
 * A change that grows them moves the budget by what it measured and no more, and says why in
 * bench/HISTORY.md ("Bundle size history"), where every past move is written down.
 */
const CORE_BUDGET = 15.81 * 1024;
const SHAKEN_BUDGET = 9.76 * 1024;

interface Measured {
  minified: number;
  gzipped: number;
  inputs: string[];
  /** Minified bytes per source module, largest first: where to look when a budget is exceeded. */
  bySource: [string, number][];
}

/**
 * Bundles `entry` the way an app bundler would: resolving `ratekeeper` through the package's own
 * `exports` map to dist/, honouring `"sideEffects": false`, minified for the browser.
 */
async function measure(entry: string): Promise<Measured> {
  const bundle = (alias: Record<string, string>) =>
    build({
      stdin: { contents: entry, resolveDir: root, loader: 'js' },
      alias,
      bundle: true,
      minify: true,
      treeShaking: true,
      format: 'esm',
      platform: 'browser',
      target: 'es2022',
      write: false,
      metafile: true,
      logLevel: 'silent',
    });
  const built = await bundle({});
  // The same entry over src/ names the modules behind the bytes; the budget is on the built files.
  const fromSource = await bundle({ ratekeeper: './src/index.ts' });
  const code = built.outputFiles[0]?.contents ?? new Uint8Array();
  const sourceInputs = Object.values(fromSource.metafile.outputs)[0]?.inputs ?? {};
  return {
    minified: code.byteLength,
    gzipped: gzipSync(code).byteLength,
    inputs: Object.keys(built.metafile.inputs).filter((input) => input !== '<stdin>'),
    bySource: Object.entries(sourceInputs)
      .map(([file, { bytesInOutput }]): [string, number] => [file, bytesInOutput])
      .filter(([, bytes]) => bytes > 0)
      .sort((a, b) => b[1] - a[1]),
  };
}

const report = (what: string, { minified, gzipped, bySource }: Measured, budget: number) =>
  console.log(
    `size: ${what}: ${minified} B minified, ${gzipped} B gzipped (budget ${budget} B)\n` +
      `  minified bytes by module: ${bySource.map(([file, bytes]) => `${file.replace(/^src\//, '')} ${bytes}`).join(', ')}`,
  );

describe('package size', () => {
  beforeAll(() => {
    if (!existsSync(`${root}dist/index.js`)) throw new Error('dist/index.js is missing: run `npx tsup` (npm test builds it first)');
  });

  it(`the whole core entry, minified and gzipped, stays under ${CORE_BUDGET} bytes`, async () => {
    const core = await measure(`export * from 'ratekeeper';`);
    report('ratekeeper (everything)', core, CORE_BUDGET);
    // Built files only: the core pulls in no dependency and no Node module, so it bundles for a browser as is.
    expect(core.inputs.every((input) => input.startsWith('dist/'))).toBe(true);
    expect(core.gzipped).toBeLessThan(CORE_BUDGET);
  });

  it(`KeyedRateLimiter + TokenBucket alone tree-shake to under ${SHAKEN_BUDGET} bytes gzipped`, async () => {
    const core = await measure(`export * from 'ratekeeper';`);
    const shaken = await measure(`export { KeyedRateLimiter, TokenBucket } from 'ratekeeper';`);
    report('{ KeyedRateLimiter, TokenBucket }', shaken, SHAKEN_BUDGET);
    expect(shaken.gzipped).toBeLessThan(SHAKEN_BUDGET);
    expect(shaken.minified).toBeLessThan(core.minified); // the other algorithms really were dropped
  });

  it(`a realistic use (Rule too, one limiter built) stays under ${SHAKEN_BUDGET} bytes gzipped`, async () => {
    const used = await measure(
      `import { KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
       export const limiter = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perSecond(4)) });`,
    );
    report('a limiter built from { KeyedRateLimiter, Rule, TokenBucket }', used, SHAKEN_BUDGET);
    expect(used.gzipped).toBeLessThan(SHAKEN_BUDGET);
  });
});
