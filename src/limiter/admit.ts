import type { Decision } from '../core/decision';
import { rangeError, typeError } from '../core/errors';
import { describe, integerIn, isThenable } from '../core/validate';
import { alreadySettled, type AsyncReservation, type Reservation } from './reservation';

/** A limiter `admit` can take a part of: `KeyedRateLimiter`, `RedisRateLimiter`, `PostgresRateLimiter`, or your own. */
export interface AdmittingRateLimiter {
  reserve(key: string, permits?: number): Reservation | Promise<AsyncReservation>;
  peek(key: string, permits?: number): Decision | Promise<Decision>;
}

/** A limiter that decides in memory: every part of this kind keeps `admit` synchronous. */
export interface MemoryAdmittingRateLimiter extends AdmittingRateLimiter {
  reserve(key: string, permits?: number): Reservation;
  peek(key: string, permits?: number): Decision;
}

/** One part of an admission: `permits` (default 1) of `key` on `limiter`. */
export interface AdmissionPart<L extends AdmittingRateLimiter = AdmittingRateLimiter> {
  readonly limiter: L;
  readonly key: string;
  readonly permits?: number | undefined;
}

/**
 * The answer to {@link admit}: one decision over every part, each part's own, and the way to settle
 * them. A refused admission spent nothing; its `settle` and `cancel` change nothing.
 */
export interface Admission {
  /** Allowed only if every part is; then the binding part's (fewest left). Refused: the refusing part's with the longest retry. */
  readonly decision: Decision;
  /** Each part's own decision, in order (after the first refusal, as its limiter's `peek` answered). */
  readonly parts: Decision[];
  /**
   * Settles each part's reservation with its real cost, one number per part, in order (as
   * `Reservation.settle`), and returns each part's state after; once only.
   * @throws TypeError unless `actual` is an array of one number per part; RangeError for a number
   * that is not a safe integer of at least 0; an `Error` with code `ERR_RATEKEEPER_ALREADY_SETTLED`
   * when a granted admission is settled or cancelled a second time.
   */
  settle(actual: readonly number[]): Decision[] | Promise<Decision[]>;
  /** Every part's `settle(0)`: the request did not happen, or must not count. */
  cancel(): void | Promise<void>;
}

/** An admission of parts all in memory: settled synchronously. */
export interface MemoryAdmission extends Admission {
  settle(actual: readonly number[]): Decision[];
  cancel(): void;
}

/** An admission with a store part: settled through the stores. A `settle` that fails for a part rejects with its error, once every part was tried. */
export interface StoreAdmission extends Admission {
  settle(actual: readonly number[]): Promise<Decision[]>;
  cancel(): Promise<void>;
}

/** Options of {@link admit}. */
export interface AdmitOptions {
  /**
   * Hears what fails while a refused admission gives back the parts granted before the refusal (a
   * store's `cancel` that fails or times out), with the part's index. Those permits stay spent
   * until the key refills; the admission is refused all the same. An error it throws is dropped.
   * @default undefined (dropped)
   */
  onError?: ((error: unknown, part: number) => void) | undefined;
}

/** A part's reservation, in memory or over a store. */
export type Held = Reservation | AsyncReservation;

/**
 * The key under which a store limiter offers to decide an admission's parts from the first of its
 * kind on, with the parts of other limiters that can join them, in one atomic call (a
 * `RedisRateLimiter`: one script over one client and hash slot; src/store/joint-admission.ts).
 * `Symbol.for`, so that two copies of the library loaded side by side (ESM and CommonJS) still
 * find each other's limiters. Its answer is undefined when the parts cannot join: the in-order path
 * then decides them.
 */
export const ADMIT_JOINTLY = Symbol.for('ratekeeper.admit.jointly');

/** A limiter offering {@link ADMIT_JOINTLY}; `held` are the reservations of the parts before `from`, all granted. */
export interface JointlyAdmitting {
  [ADMIT_JOINTLY](parts: readonly AdmissionPart[], from: number, held: readonly Held[], onError: AdmitOptions['onError']): Promise<StoreAdmission> | undefined;
}

/**
 * Admits a request across several limiters and keys at once, all or nothing: "60 a minute per
 * user, 1000 per org, and 100 000 tokens per org" as one decision. Each part is reserved in order;
 * the first refusal stops reserving (the parts after it are answered by their limiter's `peek`,
 * spending nothing) and the parts granted before it are cancelled, so a refused admission spends
 * nothing anywhere. The same limiter and key may appear twice: two reservations, decided in order.
 *
 * In memory it is synchronous and atomic. With a store part (one whose `reserve` returns a Promise)
 * it resolves once every part is decided and, when refused, once the granted parts are given back;
 * meanwhile another caller may be refused by permits about to come back. Store parts whose limiters
 * can decide them together (`RedisRateLimiter` parts on one client, keys in one hash slot) are one
 * atomic call instead, all granted or none: the other parts are then reserved first, in order (one
 * in memory before anything is sent; when one refuses, the joint parts are answered by their `peek`),
 * and given back if that call refuses. A give-back that fails
 * goes to `onError` and leaves those permits spent. A part the store's outage policy answered
 * counts as that policy answered: a degraded grant lets the admission through (it holds nothing to
 * give back), a degraded refusal refuses it.
 *
 * @throws TypeError for `parts` that is no non-empty array of `{ limiter, key, permits? }` with a
 * limiter that has `reserve` and `peek`; what a part's limiter throws, after giving back the parts
 * granted before it.
 *
 * @example
 * ```ts
 * import { admit, KeyedRateLimiter, Rule, TokenBucket } from 'ratekeeper';
 * const perUser = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(60)) });
 * const tokens = new KeyedRateLimiter({ algorithm: () => new TokenBucket(Rule.perMinute(100_000)) });
 * const admission = admit([
 *   { limiter: perUser, key: 'user-1' },
 *   { limiter: tokens, key: 'org-1', permits: 4000 }, // the estimate
 * ]);
 * if (admission.decision.allowed) {
 *   admission.settle([1, 2500]); // the request counts 1, and 2500 tokens were used: 1500 come back
 * }
 * ```
 */
export function admit(parts: readonly AdmissionPart<MemoryAdmittingRateLimiter>[], options?: AdmitOptions): MemoryAdmission;
export function admit(parts: readonly AdmissionPart[], options?: AdmitOptions): MemoryAdmission | Promise<StoreAdmission>;
export function admit(parts: readonly AdmissionPart[], options?: AdmitOptions): MemoryAdmission | Promise<StoreAdmission> {
  checkParts(parts);
  const onError = options?.onError;
  if (onError !== undefined && typeof onError !== 'function') throw typeError(`ratekeeper: \`onError\` must be a function, got ${describe(onError)}`);
  const n = parts.length;
  // Filled in order, so packed; the decisions are read off the reservations (an admission of three
  // parts is on the hot path of every request: one array fewer is measurable).
  const held: Held[] = [];
  for (let i = 0; i < n; i++) {
    const { limiter, key, permits = 1 } = parts[i]!;
    // Asked at the first store part only: its reservation below is a Promise, and the rest goes in order.
    const joint = (limiter as Partial<JointlyAdmitting>)[ADMIT_JOINTLY]?.(parts, i, held, onError);
    if (joint !== undefined) return joint;
    let reservation: Reservation | Promise<AsyncReservation>;
    try {
      reservation = limiter.reserve(key, permits);
    } catch (error) {
      giveBack(held, onError);
      throw error;
    }
    if (isThenable(reservation)) return admitOverStores(parts, i, reservation, held, decisionsOf(held), onError);
    const { decision } = reservation;
    if (!decision.allowed) {
      const decisions = decisionsOf(held);
      decisions.push(decision);
      let peeked: Promise<void> | undefined;
      try {
        peeked = peekRest(parts, i + 1, decisions);
      } catch (error) {
        giveBack(held, onError);
        throw error;
      }
      if (peeked === undefined) {
        giveBack(held, onError);
        return new MemoryAdmitted(decisions, undefined);
      }
      // A store part after the refusal: its peek is a Promise, and so is the admission.
      return peeked.then(
        () => refused(held, decisions, onError),
        (error: unknown) => refused(held, decisions, onError).then(() => Promise.reject(error)),
      );
    }
    held.push(reservation);
  }
  return new MemoryAdmitted(undefined, held);
}

/** The rest of an admission from the first store part on: each part awaited in order. */
async function admitOverStores(
  parts: readonly AdmissionPart[],
  from: number,
  first: PromiseLike<AsyncReservation>,
  held: Held[],
  decisions: Decision[],
  onError: AdmitOptions['onError'],
): Promise<StoreAdmission> {
  for (let i = from; i < parts.length; i++) {
    let reservation: Reservation | AsyncReservation;
    try {
      if (i === from) reservation = await first;
      else {
        const { limiter, key, permits = 1 } = parts[i]!;
        reservation = await limiter.reserve(key, permits);
      }
    } catch (error) {
      await giveBack(held, onError);
      throw error;
    }
    const { decision } = reservation;
    decisions.push(decision);
    if (!decision.allowed) {
      try {
        await peekRest(parts, i + 1, decisions);
      } finally {
        await giveBack(held, onError);
      }
      return new StoreAdmitted(decisions, undefined);
    }
    held.push(reservation);
  }
  return new StoreAdmitted(decisions, held);
}

async function refused(held: Held[], decisions: Decision[], onError: AdmitOptions['onError']): Promise<StoreAdmission> {
  await giveBack(held, onError);
  return new StoreAdmitted(decisions, undefined);
}

/**
 * Answers the parts from `from` on not yet decided by their `peek`, spending nothing: undefined when every answer
 * came at once, else a Promise of them all (asked together: a peek writes nothing, so their order
 * cannot matter).
 */
export function peekRest(parts: readonly AdmissionPart[], from: number, decisions: Decision[]): Promise<void> | undefined {
  let pending: Promise<void>[] | undefined;
  for (let j = from; j < parts.length; j++) {
    if (decisions[j] !== undefined) continue;
    const { limiter, key, permits = 1 } = parts[j]!;
    const answer = limiter.peek(key, permits);
    if (isThenable(answer)) (pending ??= []).push(answer.then((decision) => void (decisions[j] = decision)));
    else decisions[j] = answer;
  }
  return pending === undefined ? undefined : Promise.all(pending).then(() => undefined);
}

/**
 * Cancels the parts held (every part granted before the refusal), in order; synchronously when they are all in memory, else a
 * Promise once every store has answered. A cancel that fails goes to `onError`. (In order: a store
 * whose bucket refunds are safe rather than exact gives back in full what is cancelled earliest first.)
 */
export function giveBack(held: readonly Held[], onError: AdmitOptions['onError']): Promise<void> | undefined {
  let pending: Promise<void>[] | undefined;
  for (let i = 0; i < held.length; i++) {
    const reservation = held[i];
    // A part decided by its peek, or not reserved (an admission of joint parts), holds nothing.
    if (reservation === undefined) continue;
    try {
      const cancelled = reservation.cancel();
      if (isThenable(cancelled)) (pending ??= []).push(cancelled.then(undefined, (error: unknown) => report(onError, error, i)));
    } catch (error) {
      report(onError, error, i);
    }
  }
  return pending === undefined ? undefined : Promise.all(pending).then(() => undefined);
}

function report(onError: AdmitOptions['onError'], error: unknown, part: number): void {
  try {
    onError?.(error, part);
  } catch {
    // The admission is answered already: a hook that throws has no one left to tell.
  }
}

/** What both kinds of admission share: the decisions, and the reservations a granted one holds until it settles. */
abstract class Admitted {
  readonly decision: Decision;
  #parts: Decision[] | undefined;
  readonly #held: Held[] | undefined;
  #settled = false;

  /**
   * @param parts the decisions, or undefined to read them off `held` when first asked for.
   * @param held undefined when refused: nothing is held.
   */
  constructor(parts: Decision[] | undefined, held: Held[] | undefined) {
    this.#parts = parts;
    this.#held = held;
    this.decision = held === undefined ? longestRefusal(parts!) : binding(held);
  }

  get parts(): Decision[] {
    return (this.#parts ??= decisionsOf(this.#held!));
  }

  /** The reservations to settle with `actual`, once; undefined for a refused admission, which has none. */
  protected take(actual: readonly number[]): Held[] | undefined {
    checkActual(actual, this.parts.length);
    if (this.#held === undefined) return undefined;
    if (this.#settled) throw alreadySettled();
    this.#settled = true;
    return this.#held;
  }
}

class MemoryAdmitted extends Admitted implements MemoryAdmission {
  settle(actual: readonly number[]): Decision[] {
    const held = this.take(actual);
    if (held === undefined) return [...this.parts];
    const after: Decision[] = [];
    for (let i = 0; i < held.length; i++) after.push((held[i] as Reservation).settle(actual[i]!));
    return after;
  }

  cancel(): void {
    // Each part's own cancel, not a settle of 0: what observes a limiter hears a cancel.
    for (const reservation of this.take(zeros(this.parts.length)) ?? []) (reservation as Reservation).cancel();
  }
}

export class StoreAdmitted extends Admitted implements StoreAdmission {
  async settle(actual: readonly number[]): Promise<Decision[]> {
    const held = this.take(actual);
    if (held === undefined) return [...this.parts];
    return everyPart(held.map(async (reservation, i) => reservation.settle(actual[i]!)));
  }

  async cancel(): Promise<void> {
    await everyPart((this.take(zeros(this.parts.length)) ?? []).map(async (reservation) => reservation.cancel()));
  }
}

/** The binding part of a granted admission: the fewest left, the first on a tie. */
function binding(held: readonly Held[]): Decision {
  let tightest = held[0]!.decision;
  for (let i = 1; i < held.length; i++) {
    const { decision } = held[i]!;
    if (decision.remaining < tightest.remaining) tightest = decision;
  }
  return tightest;
}

/** Every part is tried, whatever another's store does; the first failure, in part order, rejects. */
async function everyPart<T>(calls: readonly Promise<T>[]): Promise<T[]> {
  const outcomes = await Promise.allSettled(calls);
  return outcomes.map((outcome) => {
    if (outcome.status === 'rejected') throw outcome.reason;
    return outcome.value;
  });
}

function zeros(count: number): number[] {
  return new Array<number>(count).fill(0);
}

export function decisionsOf(held: readonly Held[]): Decision[] {
  return held.map((reservation) => reservation!.decision);
}

/** The refusing part that waits longest, the first on a tie: once it allows, every part does. */
function longestRefusal(parts: readonly Decision[]): Decision {
  let longest: Decision | undefined;
  for (const part of parts) if (!part.allowed && (longest === undefined || part.retryAfterMs > longest.retryAfterMs)) longest = part;
  return longest!;
}

/** Every part checked before any is reserved: bad input throws and leaves nothing spent. */
function checkParts(parts: readonly AdmissionPart[]): void {
  if (!Array.isArray(parts)) throw typeError(`ratekeeper: \`parts\` must be an array of { limiter, key, permits? }, got ${describe(parts)}`);
  if (parts.length === 0) throw rangeError('ratekeeper: `parts` must hold at least one part, got an empty array');
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i] as Partial<AdmissionPart> | null;
    if (part === null || typeof part !== 'object') throw typeError(`ratekeeper: \`parts[${i}]\` must be an object, got ${describe(part)}`);
    const limiter = part.limiter as Partial<AdmittingRateLimiter> | null | undefined;
    if (limiter === null || typeof limiter !== 'object' || typeof limiter.reserve !== 'function' || typeof limiter.peek !== 'function') {
      throw typeError(`ratekeeper: \`parts[${i}].limiter\` must have reserve(key, permits) and peek(key, permits) methods, got ${describe(limiter)}`);
    }
  }
}

/** One safe integer of at least 0 per part, all checked before any part is settled. */
function checkActual(actual: readonly number[], count: number): void {
  if (!Array.isArray(actual) || actual.length !== count) {
    throw typeError(`ratekeeper: \`actual\` must be an array of one number per part (${count}), got ${Array.isArray(actual) ? `${actual.length} numbers` : describe(actual)}`);
  }
  for (let i = 0; i < count; i++) {
    const value = actual[i];
    // The message is built only for a bad value: this runs for every part of every settle.
    if (!(Number.isInteger(value) && value! >= 0 && value! <= Number.MAX_SAFE_INTEGER)) integerIn(`actual[${i}]`, value, 0, Number.MAX_SAFE_INTEGER);
  }
}
