import { type AdmissionPart, type AdmitOptions, decisionsOf, giveBack, type Held, type StoreAdmission, StoreAdmitted } from '../limiter/admit';
import type { AsyncReservation } from '../limiter/reservation';

// `admit`'s atomic path (API.md, "Admission across keys"): store parts that can be decided in one
// call are, all granted or none. src/limiter/admit.ts hands an admission over at its first part
// whose limiter offers ADMIT_JOINTLY (a store limiter); here every part offering JOINT says whether
// it can join the others (same client, same hash slot), and the joint parts are sent together.

/**
 * The key under which a limiter offers to decide its parts of an admission together with others in
 * one atomic call (`RedisRateLimiter`: one script over one client and hash slot). `Symbol.for`, so
 * that two copies of the library loaded side by side (ESM and CommonJS) still join each other's parts.
 */
export const JOINT = Symbol.for('ratekeeper.admit.joint');

/** What a limiter offering {@link JOINT} answers for one part: how it may join others, and how to reserve it so. */
export interface JointPart {
  /** Parts join in one call when every one's `together` is the same value (the client) and `slot` the same number (the hash slot). */
  readonly together: unknown;
  readonly slot: number;
  /** A gathering of `count` parts, sent as one call once each has joined it (or left it, answered before its turn: a failed rule lookup, a timeout). */
  gather(count: number): unknown;
  /** Reserves this part as the `index`-th of `gathering`: resolves as `reserve` would, once the gathering is answered. */
  reserve(gathering: unknown, index: number): Promise<AsyncReservation>;
}

/** A limiter offering {@link JOINT}: undefined for a part it cannot join (another store's, or bad input, which its `reserve` then reports). */
export interface JointAdmitting {
  [JOINT](key: string, permits: number): JointPart | undefined;
}

/**
 * From part `from` on: when every part left can join one call (at least two, one client and hash
 * slot), they are reserved in one atomic call, deciding in order as one by one would. Undefined
 * otherwise (several clients or slots, or a part that cannot join, such as one in memory after a
 * store part): the in-order path decides them, so that the first refusal in order is the one reported.
 */
export function admitJointly(parts: readonly AdmissionPart[], from: number, held: readonly Held[], onError: AdmitOptions['onError']): Promise<StoreAdmission> | undefined {
  const joint: JointPart[] = [];
  for (let i = from; i < parts.length; i++) {
    const { limiter, key, permits = 1 } = parts[i]!;
    const part = (limiter as Partial<JointAdmitting>)[JOINT]?.(key, permits);
    if (part === undefined || (joint.length > 0 && (part.together !== joint[0]!.together || part.slot !== joint[0]!.slot))) return undefined;
    joint.push(part);
  }
  // One joint part alone gains nothing from a call of its own: its reservation is one round trip too.
  return joint.length < 2 ? undefined : jointly(from, [...held], joint, onError);
}

async function jointly(from: number, held: Held[], joint: readonly JointPart[], onError: AdmitOptions['onError']): Promise<StoreAdmission> {
  const decisions = decisionsOf(held);
  const gathering = joint[0]!.gather(joint.length);
  const outcomes = await Promise.allSettled(joint.map((part, m) => part.reserve(gathering, m)));
  let failure: PromiseRejectedResult | undefined;
  for (let m = 0; m < outcomes.length; m++) {
    const outcome = outcomes[m]!;
    if (outcome.status === 'rejected') failure ??= outcome;
    else {
      held[from + m] = outcome.value;
      decisions[from + m] = outcome.value.decision;
    }
  }
  if (failure !== undefined) {
    await giveBack(held, onError);
    throw failure.reason;
  }
  if (decisions.every((decision) => decision.allowed)) return new StoreAdmitted(decisions, held);
  // Refused: the joint call granted none of its parts (those the outage policy granted hold
  // nothing); the parts reserved before it are given back.
  await giveBack(held, onError);
  return new StoreAdmitted(decisions, undefined);
}
