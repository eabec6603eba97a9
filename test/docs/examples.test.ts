// Docs that cannot drift: every ```ts block in README.md and docs/*.md and every JSDoc `@example`
// in src/ is written out as a file and compiled against the sources with the project's strict
// settings, `ratekeeper` and each subpath (`ratekeeper/redis`, `ratekeeper/postgres`, `ratekeeper/shared`, ...)
// mapped to src/. An example followed by a ```text block is also run under plain Node, and must print exactly that.
import { execFile } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Example, fileNameOf, jsdocExamples, markdownExamples } from './extract';

const root = fileURLToPath(new URL('../..', import.meta.url));
const out = resolve(root, 'node_modules/.cache/ratekeeper-doc-examples');

const read = (path: string) => readFileSync(resolve(root, path), 'utf8');
const walk = (dir: string): string[] =>
  readdirSync(resolve(root, dir), { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? walk(join(dir, entry.name)) : entry.name.endsWith('.ts') ? [join(dir, entry.name)] : [],
  );

const markdown = ['README.md', ...readdirSync(resolve(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
const sources = walk('src').sort();
const examples: Example[] = [
  ...markdown.flatMap((path) => markdownExamples(path, read(path))),
  ...sources.flatMap((path) => jsdocExamples(path, read(path))),
];
const checked = examples.filter((example) => !example.skipped && example.code !== '');
const runnable = checked.filter((example) => example.output !== undefined);

const tsconfig = {
  extends: resolve(root, 'tsconfig.json'),
  compilerOptions: {
    noEmit: true,
    moduleDetection: 'force', // each example is its own module, even one without imports
    paths: {
      ratekeeper: [resolve(root, 'src/index.ts')],
      'ratekeeper/redis': [resolve(root, 'src/redis.ts')],
      'ratekeeper/postgres': [resolve(root, 'src/postgres.ts')],
      'ratekeeper/http': [resolve(root, 'src/http.ts')],
      'ratekeeper/shared': [resolve(root, 'src/shared.ts')],
    },
  },
  include: ['*.ts'],
};

/** Compiler errors per generated file, as `source:line:column message` pointing into the README or src. */
const errorsByFile = new Map<string, string[]>();

beforeAll(() => {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  writeFileSync(resolve(out, 'tsconfig.json'), `${JSON.stringify(tsconfig, null, 2)}\n`);
  for (const example of checked) writeFileSync(resolve(out, fileNameOf(example)), `${example.code}\n`);

  const parsed = ts.getParsedCommandLineOfConfigFile(resolve(out, 'tsconfig.json'), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    },
  });
  if (parsed === undefined) throw new Error('could not read the generated tsconfig');
  const program = ts.createProgram(parsed.fileNames, parsed.options);
  const bySource = new Map(checked.map((example) => [resolve(out, fileNameOf(example)), example]));
  for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
    const message = `TS${diagnostic.code} ${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')}`;
    const example = diagnostic.file === undefined ? undefined : bySource.get(resolve(diagnostic.file.fileName));
    if (diagnostic.file === undefined || example === undefined) {
      // Errors inside src/ itself are `tsc --noEmit`'s to report; only global ones are ours.
      if (diagnostic.file === undefined) errorsByFile.set('(global)', [...(errorsByFile.get('(global)') ?? []), message]);
      continue;
    }
    const at = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start ?? 0);
    const where = `${example.source}:${example.line + at.line}:${at.character + 1}`;
    errorsByFile.set(fileNameOf(example), [...(errorsByFile.get(fileNameOf(example)) ?? []), `${where} ${message}`]);
  }
}, 60_000);

describe('documentation examples', () => {
  it('are found where expected: the README usage and a JSDoc @example for every one written', () => {
    const counts = Object.fromEntries(
      ['README.md', 'docs/', 'src/'].map((prefix) => [prefix, checked.filter((e) => e.source.startsWith(prefix)).length]),
    );
    console.log(
      `doc examples: ${checked.length} compiled (${JSON.stringify(counts)}), ${runnable.length} run, ` +
        `${examples.filter((e) => e.skipped).length} opted out with no-check`,
    );
    expect(counts['README.md']).toBeGreaterThan(0);
    const tags = sources.reduce((sum, path) => sum + (read(path).match(/^\s*\*\s*@example\b/gm)?.length ?? 0), 0);
    expect(examples.filter((e) => e.source.startsWith('src/')).length).toBe(tags);
    expect(runnable.map((e) => e.source)).toContain('README.md');
  });

  it('every JSDoc @example is a ```ts block (so that it can be compiled)', () => {
    const bare = examples.filter((e) => e.code === '').map((e) => `${e.source}:${e.line}`);
    expect(bare).toEqual([]);
  });

  it('no compiler error outside any example (options, missing types)', () => {
    expect(errorsByFile.get('(global)') ?? []).toEqual([]);
  });

  it.each(checked.map((example) => [`${example.source}:${example.line}`, example] as const))(
    '%s compiles',
    (_, example) => {
      expect(errorsByFile.get(fileNameOf(example)) ?? []).toEqual([]);
    },
  );

  it.concurrent.each(runnable.map((example) => [`${example.source}:${example.line}`, example] as const))(
    '%s prints the output shown after it',
    async (_, example) => {
      // An ES module, as in the README's package (`"type": "module"`): top-level `await` works.
      const file = resolve(out, `run-${fileNameOf(example).replace(/\.ts$/, '.mts')}`);
      // Run as a user would, except that the package specifiers point at the sources.
      const code = example.code.replace(/from '(ratekeeper(?:\/redis|\/postgres|\/http|\/shared)?)'/g, (_, specifier: string) => {
        const entry = { ratekeeper: 'index', 'ratekeeper/redis': 'redis', 'ratekeeper/postgres': 'postgres', 'ratekeeper/http': 'http', 'ratekeeper/shared': 'shared' }[specifier];
        return `from '${relative(out, resolve(root, `src/${entry}.ts`))}'`;
      });
      writeFileSync(file, `${code}\n`);
      const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', file], {
        cwd: root,
        timeout: 20_000,
      });
      expect(stdout.trimEnd()).toBe(example.output?.trimEnd());
    },
    30_000,
  );
});
