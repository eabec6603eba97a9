import type { TestProject } from 'vitest/node';
import { needed } from '../stores/servers/servers';
import { hasRedisServer, startRedisServer } from './helpers/redis-server';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The port of the redis-server started for this run, or 0 when there is none (the Redis suites skip). */
    redisPort: number;
  }
}

/**
 * Starts one redis-server for the whole run, when a selected test file needs it; each Redis test
 * file keys its data by its own prefix.
 */
export default async function setup(project: TestProject): Promise<(() => Promise<void>) | undefined> {
  if (!needed(project, 'redis-server')) {
    project.provide('redisPort', 0);
    return undefined;
  }
  if (!hasRedisServer()) {
    const message = 'redis-server is not installed: the Redis suites (test/redis) cannot run. Install it, e.g. `apt-get install redis-server`.';
    if (process.env.CI === 'true') throw new Error(message);
    console.warn(`\n${'!'.repeat(100)}\n!!! ${message}\n!!! They are SKIPPED here; with CI=true they fail.\n${'!'.repeat(100)}\n`);
    project.provide('redisPort', 0);
    return undefined;
  }
  const server = await startRedisServer();
  project.provide('redisPort', server.port);
  return () => server.stop();
}
