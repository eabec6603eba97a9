/** A call {@link KeyOrder} sends: its row key, whether it is answered yet, and whether it may share a batch. */
export interface Ordered {
  /** The caller's key: within one limiter it names the row. */
  readonly key: string;
  /** Set once the call has its answer (from its timeout, say): a call still waiting is then never sent. */
  readonly answered: boolean;
  /** `'decide'` for a decision, which may share its batch with decisions on other keys; any other operation goes alone. */
  readonly op: string;
}

/**
 * Puts calls into batches and lets the batches travel side by side (a pool sends them on several
 * connections, where the database may run them in any order) while the calls on one key still
 * reach it in the order they were made: a call waits only while a batch holding its key is out,
 * and only behind that batch, so a key that does not answer holds back its own calls and no other.
 *
 * A batch of decisions never waits for a row another transaction holds: PostgreSQL skips that key
 * and says so, and its calls then go again alone, waiting for the row up to the limiter's
 * `lock_timeout`. So a stuck key never holds up the other keys of a batch, and holds at most one
 * connection of the pool: one batch per key is out at a time.
 */
export class KeyOrder<C extends Ordered> {
  readonly #send: (batch: C[]) => void;
  readonly #maxBatch: number;
  /** The keys of the batches out, each with the calls that wait for it to come back, in order. */
  readonly #busy = new Map<string, C[]>();
  /**
   * Keys whose row another transaction held in their last batch: their next call goes alone (and
   * may wait for the row). Only keys with a batch out, so the set stays small.
   */
  readonly #alone = new Set<string>();

  /**
   * @param send sends a batch; the caller calls {@link done} once its answer is back (or failed).
   * @param maxBatch the most decisions one batch carries.
   */
  constructor(send: (batch: C[]) => void, maxBatch: number) {
    this.#send = send;
    this.#maxBatch = maxBatch;
  }

  /** Sends the calls, in the order given, as batches: decisions together, any other operation alone. */
  add(calls: Iterable<C>): void {
    const batches: C[][] = [];
    let shared: C[] = [];
    // The keys of `shared`: a later decision on one of them joins it (they decide in the order
    // asked), unless a call of the key already waits for it.
    const sharedKeys = new Set<string>();
    for (const call of calls) {
      if (call.answered) continue;
      const key = call.key;
      if (call.op === 'decide' && sharedKeys.has(key) && this.#busy.get(key)!.length === 0) {
        shared.push(call);
      } else if (this.#busy.has(key)) {
        this.#busy.get(key)!.push(call);
        continue;
      } else {
        this.#busy.set(key, []);
        if (call.op !== 'decide' || this.#alone.has(key)) {
          batches.push([call]);
          continue;
        }
        shared.push(call);
        sharedKeys.add(key);
      }
      if (shared.length === this.#maxBatch) {
        batches.push(shared);
        shared = [];
        sharedKeys.clear();
      }
    }
    if (shared.length > 0) batches.push(shared);
    for (const batch of batches) this.#send(batch);
  }

  /**
   * Called once per batch sent, when it has come back (answered or failed): `skipped` are its calls
   * PostgreSQL left undecided because another transaction held their row; they go again, alone,
   * and then the calls that waited for the batch's keys.
   */
  done(batch: readonly C[], skipped: readonly C[]): void {
    // A key's skipped calls were made before those that waited for it: they go first.
    const next = [...skipped];
    for (const call of batch) {
      const key = call.key;
      const waiting = this.#busy.get(key);
      if (waiting === undefined) continue;
      this.#alone.delete(key);
      this.#busy.delete(key);
      for (const later of waiting) next.push(later);
    }
    for (const call of skipped) this.#alone.add(call.key);
    this.add(next);
  }
}
