import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/redis/global-setup.ts', 'test/stores/global-setup.ts'],
    reporters: ['default', './test/support/skipped-servers-reporter.ts'],
    // The flood and property tests do real work (a million keys); on a loaded 2-core machine they
    // pass 5 s. They assert behaviour, never speed, so a longer bound costs nothing but a hang's wait.
    testTimeout: 30_000,
  },
});
