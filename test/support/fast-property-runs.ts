import fc from 'fast-check';

// `npm run test:fast` only: every property without its own `numRuns` tries 10 cases instead of 100,
// which keeps the loop within seconds; `npm test` runs the full counts. (fast-check, not
// @fast-check/vitest: the test files' properties run on this same instance, and this import is quick.)
fc.configureGlobal({ numRuns: 10 });
