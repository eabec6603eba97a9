import { defineConfig } from 'vitest/config';

// `npm run test:fast` (mode `fast`): the suites that test the library itself in memory, for the edit
// and test loop. It starts no server (the parts that need one skip, their ports provided as 0) and
// runs fewer property cases; `npm test` runs every file at full counts with every server.
const fastSet = ['test/core', 'test/algorithms', 'test/limiter', 'test/http'].map((folder) => `${folder}/**/*.test.ts`).concat('test/conformance.test.ts');

export default defineConfig(({ mode }) => {
  const fast = mode === 'fast';
  return {
    test: {
      include: fast ? fastSet : ['test/**/*.test.ts'],
      // Each starts only the servers the selected test files need (see servers.ts).
      globalSetup: fast ? [] : ['test/redis/global-setup.ts', 'test/stores/global-setup.ts'],
      isolate: !fast,
      setupFiles: fast ? ['test/support/fast-property-runs.ts'] : [],
      provide: fast ? { redisPort: 0, valkeyPort: 0, postgresPort: 0 } : {},
      reporters: ['default', ['./test/support/skipped-servers-reporter.ts', { fast }]],
      // The flood and property tests do real work (a million keys); on a loaded 2-core machine they
      // pass 5 s. They assert behaviour, never speed, so a longer bound costs nothing but a hang's wait.
      testTimeout: 30_000,
    },
  };
});
