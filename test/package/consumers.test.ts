// The packed tarball, installed offline into a consumer project, as users get it: its types under
// every module resolution TypeScript offers, with TypeScript 5.4 (the oldest the README promises), 5.9
// and 6; the ESM and CommonJS builds mixed in one process, and a script that exits at once after close().
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

/** Module resolutions: name, compiler options, and the files compiled. */
const resolutions = {
  node10: { module: 'commonjs', moduleResolution: 'node10', lib: ['ES2022', 'DOM', 'ESNext.Disposable'] },
  node16: { module: 'node16', moduleResolution: 'node16', lib: ['ES2022', 'DOM', 'ESNext.Disposable'] },
  bundler: { module: 'esnext', moduleResolution: 'bundler', lib: ['ES2022', 'DOM'] }, // a lib without disposables
} as const;
const filesOf: Record<keyof typeof resolutions, string[]> = {
  node10: ['subpaths.ts', 'options-undefined.ts', 'closing.ts'],
  node16: ['subpaths.ts', 'subpaths.cts', 'options-undefined.ts', 'closing.ts'],
  bundler: ['subpaths.ts', 'options-undefined.ts'],
};
/** TypeScript 6 deprecates node10 (7 removes it): there it needs the user's own opt-in, as the README says. */
const node10OnTypeScript6 = { ...resolutions.node10, ignoreDeprecations: '6.0' };

/**
 * The promised matrix (README "Install"): the oldest TypeScript promised and the project's own on
 * every resolution; TypeScript 6 on node16 and bundler, and on node10 with its deprecation silenced.
 */
const variants: { typescript: string; resolution: keyof typeof resolutions; options: Record<string, unknown> }[] = [
  ...(['typescript-5.4', 'typescript'] as const).flatMap((typescript) =>
    (['node10', 'node16', 'bundler'] as const).map((resolution) => ({ typescript, resolution, options: resolutions[resolution] })),
  ),
  { typescript: 'typescript-6', resolution: 'node16', options: resolutions.node16 },
  { typescript: 'typescript-6', resolution: 'bundler', options: resolutions.bundler },
  { typescript: 'typescript-6', resolution: 'node10', options: node10OnTypeScript6 },
];
const versionOf = (typescript: string) =>
  (JSON.parse(readFileSync(resolve(root, `node_modules/${typescript}/package.json`), 'utf8')) as { version: string }).version;

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
  for (const [i, { resolution, options }] of variants.entries()) {
    writeFileSync(resolve(consumer, `tsconfig.${i}.json`), JSON.stringify({ compilerOptions: { ...strict, ...options }, files: filesOf[resolution] }));
  }
  writeFileSync(resolve(consumer, 'tsconfig.node10-plain.json'), JSON.stringify({ compilerOptions: { ...strict, ...resolutions.node10 }, files: filesOf.node10 }));
}, 120_000);

describe('the packed tarball in a consumer project', () => {
  it('lists every entry point of the exports map', () => {
    expect(subpaths).toEqual(expect.arrayContaining(['ratekeeper', 'ratekeeper/redis', 'ratekeeper/http']));
  });

  it('covers TypeScript 5.4, 5.9 and 6', () => {
    expect([versionOf('typescript-5.4'), versionOf('typescript')].map((v) => v.split('.').slice(0, 2).join('.'))).toEqual(['5.4', '5.9']);
    expect(versionOf('typescript-6').split('.')[0]).toBe('6');
  });

  it.concurrent.each(variants.map(({ typescript, resolution }, i) => [versionOf(typescript), resolution, i] as const))(
    'type-checks under TypeScript %s, %s resolution: every subpath, undefined options, using, error codes',
    async (_version, _resolution, i) => {
      expect(await tsc(variants[i]?.typescript ?? '', `tsconfig.${i}.json`)).toBe('');
    },
    120_000,
  );

  it('TypeScript 6 refuses node10 without ignoreDeprecations, as the README warns', async () => {
    expect(await tsc('typescript-6', 'tsconfig.node10-plain.json')).toMatch(/TS5107.*moduleResolution=node10.*deprecated/s);
  }, 120_000);

  it('mixes the ESM and CommonJS builds in one process: rules, composites, limiters, errors by code', async () => {
    const { stdout } = await run(process.execPath, ['mixed-copies.mjs'], { cwd: consumer });
    const lines = stdout.trim().split('\n');
    expect(lines.filter((line) => !line.startsWith('ok '))).toEqual([]);
    expect(lines).toHaveLength(11);
  }, 30_000);

  it.each(['abandoned-wait.mjs', 'abandoned-wait.cjs'])('%s exits at once after close(), each wait settled with its code', async (script) => {
    // The wait left behind is for a minute: a script still running after half of it is killed,
    // which rejects. No tighter bound: how long Node takes to start depends on the machine's load.
    const { stdout } = await run(process.execPath, [script], { cwd: consumer, timeout: 30_000 });
    expect(stdout.trim().split('\n')).toEqual(script.endsWith('.cjs') ? ['ERR_RATEKEEPER_CLOSED', 'ERR_RATEKEEPER_CLOSED'] : ['ERR_RATEKEEPER_CLOSED']);
  }, 40_000);
});
