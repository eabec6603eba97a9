import { defineConfig } from 'vitest/config';

// `npm run test:fast` (mode `fast`): the suites that test the library itself in memory, for the edit
// and test loop. It starts no server (the parts that need one skip: their ports are 0), runs fewer
// property cases, and runs the files in one shared module graph, since importing each file's modules
// afresh took most of the run's time. `npm test` runs every file isolated, at full counts.
const fast = {
  include: [...['core', 'algorithms', 'limiter', 'http'].map((folder) => `test/${folder}/**/*.test.ts`), 'test/conformance.test.ts'],
  // A million-key flood is a scale test, not an edit-loop one: a sixth of the fast set's time alone.
  exclude: ['test/limiter/flood.test.ts'],
  globalSetup: [],
  provide: { redisPort: 0, valkeyPort: 0, postgresPort: 0, pgbouncerPort: 0 },
  setupFiles: ['test/support/fast-property-runs.ts'],
  isolate: false,
};

export default defineConfig(({ mode }) => ({
  test: {
    include: ['test/**/*.test.ts'],
    // Each starts only the servers the selected test files need (test/stores/servers/servers.ts).
    globalSetup: ['test/redis/global-setup.ts', 'test/stores/global-setup.ts'],
    reporters: ['default', ['./test/support/skipped-servers-reporter.ts', { fast: mode === 'fast' }]],
    // The flood and property tests do real work (a million keys); on a loaded 2-core machine they
    // pass 5 s. They assert behaviour, never speed, so a longer bound costs nothing but a hang's wait.
    testTimeout: 30_000,
    ...(mode === 'fast' ? fast : {}),
  },
}));
