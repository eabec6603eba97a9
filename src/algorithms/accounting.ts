import { allow, type Decision } from '../core/decision';
import { integerIn } from '../core/validate';

/**
 * How far into debt a `charge` may take a key, in whole limits: what a key counts as used never
 * exceeds `(1 + DEBT_LIMITS) × limit` (nor 2^53 − 1, see `usageBound`), and the part of a charge
 * beyond that is forgiven.
 *
 * One full limit: enough for a cost learnt late (a reply that used twice its estimate, failures
 * counted past the limit), small enough that every stored number stays within twice what a grant
 * can store (so the arithmetic stays as exact as the decisions), and that charges alone keep a key
 * refused for at most about two windows. Longer punishment is what `block` is for: explicit, with
 * its own end.
 */
export const DEBT_LIMITS = 1;

/**
 * The most a key may count as used: `(1 + DEBT_LIMITS) × limit`, and never past 2^53 − 1, so that
 * every count stays exact (limits past 2^52 get less than a full limit of debt). A sum past it
 * compares as past it even when rounded, since rounding keeps order.
 */
export function usageBound(limit: number): number {
  return Math.min((1 + DEBT_LIMITS) * limit, Number.MAX_SAFE_INTEGER);
}

/**
 * How many outstanding reservations a key keeps receipts for. Reservations never settled would
 * otherwise pile up in the key's state; past this the oldest receipt is voided (its refund gives
 * nothing, so the key is never better off than its twin). The stores keep the same bound
 * (src/store/constants.ts re-exports it: the core imports nothing from the stores).
 */
export const MAX_RECEIPTS = 64;

/**
 * What a granted reservation remembers, so that a refund later gives back only what is still
 * counted. Opaque: only the algorithm that issued it reads it.
 */
export type Receipt = object;

/** A reservation's grant, with the receipt a refund needs (none when refused: nothing was spent). */
export interface Reserved {
  readonly decision: Decision;
  readonly receipt: Receipt | undefined;
}

// A charge that reaches the debt bound forgives part of itself, and a refund of a reservation made
// before it could then leave the key better off than had it never reserved: the reservation's
// permits may be what the bound dropped. Such refunds give nothing back. The count of such charges
// is kept beside the state, not in it: they are rare, and a field would cost every key 8 bytes.
const forgiven = new WeakMap<object, number>();

/** How many charges on `state` have reached the debt bound; a receipt records it when issued. */
export function forgivenCount(state: object): number {
  return forgiven.get(state) ?? 0;
}

/** Records that a charge on `state` reached the debt bound, voiding the receipts issued before. */
export function forgive(state: object): void {
  forgiven.set(state, forgivenCount(state) + 1);
}

/** Checks the permits of a charge: any positive safe integer, the limit included or not. */
export function checkCharge(permits: number): void {
  if (!(Number.isInteger(permits) && permits >= 1 && permits <= Number.MAX_SAFE_INTEGER)) {
    integerIn('permits', permits, 1, Number.MAX_SAFE_INTEGER);
  }
}

/**
 * The answer to `peek(nowMs, 0)`: the state now. A key in debt is refused even a request of 0
 * permits by the algorithm's own formula; for a dashboard it is simply a key with none left.
 */
export function stateNow(decision: Decision): Decision {
  return decision.allowed ? decision : allow(decision.limit, decision.remaining, decision.resetAfterMs);
}
