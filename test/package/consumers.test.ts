// The packed tarball, installed offline into a consumer project, as users get it: its types under
// every module resolution TypeScript offers (and the oldest TypeScript the README promises), the
// ESM and CommonJS builds mixed in one process, and a script that exits at once after close().
//
// Adding an entry point: its block in package.json's `exports` and its src/<name>.ts. tsup builds
// every subpath listed there, typesVersions maps every subpath for `moduleResolution: node10` by a
// wildcard, and this test imports every subpath listed there under every resolution.
import { execFile, execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));
const fixtures = resolve(root, 'test/package/fixtures');
const consumer = resolve(root, 'node_modules/.cache/ratekeeper-consumer');
const run = promisify(execFile);
const pkg = JSON.parse(readFileSync(resolve(root, 'package.json'), 'utf8')) as { exports: Record<string, unknown> };
const subpaths = Object.keys(pkg.exports)
  .filter((subpath) => subpath !== './package.json')
  .map((subpath) => (subpath === '.' ? 'ratekeeper' : `ratekeeper/${subpath.slice(2)}`));

/**
 * What every variant sets: the strictest options a user may have, and no skipping of our .d.ts files
 * (the default lib files are skipped: they are TypeScript's, and checking them costs most of the time).
 */
const strict = {
  strict: true,
  exactOptionalPropertyTypes: true,
  noUncheckedIndexedAccess: true,
  skipLibCheck: false,
  skipDefaultLibCheck: true,
  noEmit: true,
  target: 'ES2022',
  types: [],
};

/** tsconfig variants: name, compiler options, and the files compiled. */
const variants: [string, Record<string, unknown>, string[]][] = [
  ['node10 (module commonjs)', { module: 'commonjs', moduleResolution: 'node10', lib: ['ES2022', 'DOM', 'ESNext.Disposable'] }, ['subpaths.ts', 'options-undefined.ts', 'closing.ts']],
  ['node16, ESM and CJS files', { module: 'node16', moduleResolution: 'node16', lib: ['ES2022', 'DOM', 'ESNext.Disposable'] }, ['subpaths.ts', 'subpaths.cts', 'options-undefined.ts', 'closing.ts']],
  ['bundler, a lib without disposables', { module: 'esnext', moduleResolution: 'bundler', lib: ['ES2022', 'DOM'] }, ['subpaths.ts', 'options-undefined.ts']],
];

const tsc = (typescript: string, project: string) =>
  run(process.execPath, [resolve(root, `node_modules/${typescript}/bin/tsc`), '-p', project], { cwd: consumer }).then(
    () => '',
    (error: { stdout?: string }) => error.stdout ?? String(error),
  );

beforeAll(() => {
  rmSync(consumer, { recursive: true, force: true });
  mkdirSync(consumer, { recursive: true });
  // Packed once, from the dist/ that `npm test` has just built, then installed without a network.
  const tarball = execFileSync('npm', ['pack', '--silent', '--pack-destination', consumer, root], { encoding: 'utf8' }).trim().split('\n').pop() as string;
  writeFileSync(resolve(consumer, 'package.json'), `${JSON.stringify({ name: 'consumer', private: true, type: 'module' })}\n`);
  execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--no-package-lock', resolve(consumer, tarball)], { cwd: consumer, stdio: 'ignore' });
  for (const file of readdirSync(fixtures)) copyFileSync(join(fixtures, file), join(consumer, file));
  const imports = subpaths.map((subpath, i) => `import * as entry${i} from '${subpath}';\nexport const exported${i}: number = Object.keys(entry${i}).length;`).join('\n');
  writeFileSync(resolve(consumer, 'subpaths.ts'), `${imports}\n`);
  writeFileSync(resolve(consumer, 'subpaths.cts'), `${imports}\n`);
  for (const [i, [, options, files]] of variants.entries()) {
    writeFileSync(resolve(consumer, `tsconfig.${i}.json`), JSON.stringify({ compilerOptions: { ...strict, ...options }, files }));
  }
}, 120_000);

describe('the packed tarball in a consumer project', () => {
  it('lists every entry point of the exports map', () => {
    expect(subpaths).toEqual(expect.arrayContaining(['ratekeeper', 'ratekeeper/redis', 'ratekeeper/http']));
  });

  it.concurrent.each(variants.map(([name], i) => [name, i] as const))(
    'type-checks under %s: every subpath, undefined options, using, error codes',
    async (_, i) => {
      expect(await tsc('typescript', `tsconfig.${i}.json`)).toBe('');
    },
    120_000,
  );

  it('type-checks under TypeScript 5.4, the oldest the README promises', async () => {
    expect(await tsc('typescript-5.4', 'tsconfig.0.json')).toBe('');
  }, 120_000);

  it('mixes the ESM and CommonJS builds in one process: rules, composites, limiters, errors by code', async () => {
    const { stdout } = await run(process.execPath, ['mixed-copies.mjs'], { cwd: consumer });
    const lines = stdout.trim().split('\n');
    expect(lines.filter((line) => !line.startsWith('ok '))).toEqual([]);
    expect(lines).toHaveLength(11);
  }, 30_000);

  it.each(['abandoned-wait.mjs', 'abandoned-wait.cjs'])('%s exits at once after close(), each wait settled with its code', async (script) => {
    const started = performance.now();
    const { stdout } = await run(process.execPath, [script], { cwd: consumer, timeout: 30_000 });
    // The wait was for a minute; what remains is Node starting and the script's own 300 ms.
    expect(performance.now() - started).toBeLessThan(10_000);
    expect(stdout.trim().split('\n')).toEqual(script.endsWith('.cjs') ? ['ERR_RATEKEEPER_CLOSED', 'ERR_RATEKEEPER_CLOSED'] : ['ERR_RATEKEEPER_CLOSED']);
  }, 40_000);
});
