// Issue 25's targets for `admit` in memory: an admission of three parts (requests per user,
// requests per org, tokens per org) against the three `reserve` calls it is made of, and the same
// with each admission settled against each reservation settled. CPU time, interleaved rounds,
// median of per-round ratios. Run by run.ts; alone, `node --expose-gc --import tsx bench/admit.ts`
// prints its table.
import { admit, KeyedRateLimiter, Rule, TokenBucket, type Reservation } from '../src/index';
import { type Contender } from './contenders';
import { measure, sunkValue } from './measure';
import { sendToParent } from './child';
import { formatNumber, formatRatio, markdownTable, median, ratioMedian, textTable } from './stats';

const USERS = 1024;
const ORGS = 16;
const users = Array.from({ length: USERS }, (_, i) => `user-${i}`);
const orgs = Array.from({ length: ORGS }, (_, i) => `org-${i}`);
// Never refused: every admission is granted, the path a settle follows.
const huge = new Rule(2 ** 40, 60_000);
const limiters = () => Array.from({ length: 3 }, () => new KeyedRateLimiter({ algorithm: () => new TokenBucket(huge) }));

// Each contender's loop is written out (as in bench/contenders.ts): a loop shared through a callback
// makes its call site polymorphic, which costs the four contenders unevenly (measured: the admit ÷
// reserve ratio spread from 0.87 to 1.33 between runs, against 1.11 to 1.29 written out).

/** Three reservations per operation, one per limiter, settled (1, 1, 700 of 1000 tokens) when `settle`. */
function reserveThree(name: string, settle: boolean): Contender {
  const [perUser, perOrg, tokens] = limiters() as [KeyedRateLimiter, KeyedRateLimiter, KeyedRateLimiter];
  return {
    name,
    run(start, n) {
      let acc = 0;
      for (let i = start; i < start + n; i++) {
        const user = users[i & (USERS - 1)]!;
        const org = orgs[i & (ORGS - 1)]!;
        const a: Reservation = perUser.reserve(user);
        const b: Reservation = perOrg.reserve(org);
        const c: Reservation = tokens.reserve(org, 1000);
        acc += a.decision.remaining + b.decision.remaining + c.decision.remaining;
        if (settle) {
          a.settle(1);
          b.settle(1);
          acc += c.settle(700).remaining;
        }
      }
      return acc;
    },
  };
}

/** One admission of the same three parts per operation, settled the same way when `settle`. */
function admitThree(name: string, settle: boolean): Contender {
  const [perUser, perOrg, tokens] = limiters() as [KeyedRateLimiter, KeyedRateLimiter, KeyedRateLimiter];
  const actual = [1, 1, 700];
  return {
    name,
    run(start, n) {
      let acc = 0;
      for (let i = start; i < start + n; i++) {
        const user = users[i & (USERS - 1)]!;
        const org = orgs[i & (ORGS - 1)]!;
        const admission = admit([
          { limiter: perUser, key: user },
          { limiter: perOrg, key: org },
          { limiter: tokens, key: org, permits: 1000 },
        ]);
        acc += admission.decision.remaining;
        if (settle) acc += admission.settle(actual)[2]!.remaining;
      }
      return acc;
    },
  };
}

export interface AdmitResult {
  /** ns per operation, median of the rounds. */
  readonly ns: Record<string, number>;
  /** admit ÷ three reserve (target ≤ 1.2), and admit + settle ÷ three reserve + settle (target ≤ 1.2). */
  readonly ratios: { readonly admit: number; readonly admitSettle: number };
}

export async function admitBench(rounds = 15): Promise<AdmitResult> {
  const contenders = [reserveThree('3 × reserve', false), admitThree('admit of 3', false), reserveThree('3 × reserve + settle', true), admitThree('admit of 3 + settle', true)];
  const samples = await measure(contenders, { rounds, sampleMs: 50, warmupMs: 300 });
  const ns = Object.fromEntries([...samples].map(([name, values]) => [name, Math.round(median(values))]));
  return {
    ns,
    ratios: {
      admit: ratioMedian(samples.get('admit of 3'), samples.get('3 × reserve')),
      admitSettle: ratioMedian(samples.get('admit of 3 + settle'), samples.get('3 × reserve + settle')),
    },
  };
}

/** The two rows of issue 25's `admit` targets, as text and as RESULTS.md markdown. */
export function renderAdmit(result: AdmitResult): { text: string; markdown: string } {
  const { ns, ratios } = result;
  const rows = [
    ['operation', 'admit ns', '3 × reserve ns', 'ratio (target ≤ 1.2×)'],
    ['admit of 3 parts', formatNumber(ns['admit of 3'] ?? NaN), formatNumber(ns['3 × reserve'] ?? NaN), formatRatio(ratios.admit)],
    ['admit of 3 + settle', formatNumber(ns['admit of 3 + settle'] ?? NaN), formatNumber(ns['3 × reserve + settle'] ?? NaN), formatRatio(ratios.admitSettle)],
  ];
  const title = 'admit: three parts in memory beside three reserve calls';
  const about =
    'CPU ns per operation: requests per user (1024 users), requests per org (16 orgs) and 1000 tokens per org, each a KeyedRateLimiter of a TokenBucket that never refuses; admit of the three parts beside three reserve calls, and each settled (1, 1, 700) beside each reservation settled. 15 interleaved rounds; the ratio is the median of per-round ratios.';
  return { text: `\n${title}\n${textTable(rows)}\n`, markdown: `\n## ${title}\n\n${about}\n\n${markdownTable(rows)}\n` };
}

if (process.argv[1]?.endsWith('admit.ts')) {
  const result = await admitBench();
  if (process.send === undefined) console.log(renderAdmit(result).text, `(sink ${sunkValue() % 2})`);
  sendToParent(result);
}
