import type { Reporter, TestModule } from 'vitest/node';
import { servers } from '../stores/servers/servers';

/**
 * Ends every run with what it did not test: for each server this machine lacks, the number of tests
 * skipped in the files that need it, so a partial run is never mistaken for a full one. (With
 * CI=true a missing server fails the run before any test; see test/stores/global-setup.ts.)
 * `npm run test:fast` (`fast`) starts no server at all, and says so.
 */
export default class SkippedServersReporter implements Reporter {
  readonly #fast: boolean;

  constructor({ fast = false }: { fast?: boolean } = {}) {
    this.#fast = fast;
  }

  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    if (this.#fast) {
      const skipped = testModules.reduce((sum, module) => sum + [...module.children.allTests('skipped')].length, 0);
      console.log(`\n  FAST SET: no server started, fewer property runs (${skipped} tests skipped). \`npm test\` runs the full suite.\n`);
      return;
    }
    const missing = servers.filter((server) => !server.present());
    if (missing.length === 0) {
      console.log(`\n  Stores and browser: every server present (${servers.map((server) => server.name).join(', ')}); nothing skipped for want of one.\n`);
      return;
    }
    const lines = missing.map((server) => {
      let skipped = 0;
      const files = new Set<string>();
      for (const module of testModules) {
        const file = module.relativeModuleId;
        if (!server.files.some((prefix) => file.startsWith(prefix))) continue;
        for (const _test of module.children.allTests('skipped')) {
          skipped++;
          files.add(file);
        }
      }
      return `  ✗ ${server.name} missing: ${skipped} tests skipped in ${files.size} files (${[...files].join(', ') || 'none ran'})`;
    });
    const bar = '!'.repeat(100);
    console.log(`\n${bar}\n  PARTIAL RUN: this machine lacks servers the full suite needs.\n${lines.join('\n')}\n  Install them with \`sudo scripts/install-test-servers.sh\` (Debian), then run npm test again.\n${bar}\n`);
  }
}
