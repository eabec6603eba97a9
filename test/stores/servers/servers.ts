import { existsSync } from 'node:fs';
import type { TestProject } from 'vitest/node';
import { hasRedisServer } from '../../redis/helpers/redis-server';
import { hasPgBouncer } from './pgbouncer-server';
import { hasPostgres } from './postgres-server';

/**
 * What the full suite needs beyond Node, each with the test files that skip without it: a run on a
 * machine that lacks one ends with a summary naming it (test/support/skipped-servers-reporter.ts),
 * and with CI=true a missing server fails the run instead. scripts/install-test-servers.sh
 * installs them all on Debian. The global setups start a server only when a listed file is in the
 * run (`needed`), so a test file that uses one must be listed, or run alone it skips.
 */
export const servers = [
  {
    name: 'redis-server',
    present: () => hasRedisServer('redis-server'),
    files: [
      'test/redis/',
      'test/reliability/redis-faults',
      'test/limiter/observe',
      'test/stores/redis-',
      'test/stores/upstash',
      ...['express-rate-limit', 'koa', 'nestjs', 'servers', 'several-limits', 'trpc'].map((name) => `test/http/${name}.test`),
    ],
  },
  { name: 'valkey-server', present: () => hasRedisServer('valkey-server'), files: ['test/stores/valkey-', 'test/stores/glide-'] },
  { name: 'postgresql-15', present: hasPostgres, files: ['test/stores/postgres', 'test/postgres/', 'test/stores/pgbouncer-'] },
  { name: 'pgbouncer', present: hasPgBouncer, files: ['test/stores/pgbouncer-', 'test/postgres/stuck-key'] },
  { name: 'chromium', present: () => existsSync('/usr/bin/chromium'), files: ['test/browser/'] },
] as const;

export type ServerName = (typeof servers)[number]['name'];

/** The message a missing server gets, on a developer's machine (a skip) and on CI (a failure). */
export function missingMessage(name: ServerName): string {
  return `${name} is not installed, so the suites that need it cannot run: \`sudo scripts/install-test-servers.sh\` installs it.`;
}

/**
 * Whether this run's test files include one that needs the server, so that one file runs in
 * seconds: the global setups start only what is needed. A watch session may run any file later
 * and sets up once, so it starts everything.
 */
export function needed(project: TestProject, name: ServerName): boolean {
  if (project.vitest.config.watch) return true;
  const prefixes = servers.find((server) => server.name === name)!.files.map((prefix) => `${project.config.root}/${prefix}`);
  return project.vitest.state.getPaths().some((path) => prefixes.some((prefix) => path.startsWith(prefix)));
}
