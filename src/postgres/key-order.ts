/** A batch of calls, each on one key, that {@link KeyOrder} sends. */
export interface Batch {
  readonly keys: readonly string[];
  /** Set once the batch's deadline has answered its calls: a batch still waiting is then never sent. */
  abandoned: boolean;
}

/**
 * Lets batches travel side by side (a pool sends them on several connections, where the database
 * may run them in any order) while the calls on one key still reach it in the order they were
 * made: a batch leaves at once unless a batch made before it, in flight or waiting, holds one of
 * its keys; then it waits for that one to come back.
 */
export class KeyOrder<B extends Batch> {
  readonly #send: (batch: B) => void;
  /** Keys of the batches in flight, with how many hold each. */
  readonly #inFlight = new Map<string, number>();
  readonly #waiting: B[] = [];

  /** @param send sends a batch; the caller calls {@link done} once its answer is back (or failed). */
  constructor(send: (batch: B) => void) {
    this.#send = send;
  }

  add(batch: B): void {
    if (this.#waiting.length === 0 && !batch.keys.some((key) => this.#inFlight.has(key))) this.#start(batch);
    else this.#waiting.push(batch);
  }

  /** Called once per batch sent, when it has come back: lets the batches waiting for its keys go. */
  done(batch: B): void {
    for (const key of batch.keys) {
      const holders = this.#inFlight.get(key)!;
      if (holders === 1) this.#inFlight.delete(key);
      else this.#inFlight.set(key, holders - 1);
    }
    const blocked = new Set(this.#inFlight.keys());
    let kept = 0;
    for (const waiting of this.#waiting) {
      if (waiting.abandoned) continue;
      if (waiting.keys.some((key) => blocked.has(key))) {
        for (const key of waiting.keys) blocked.add(key);
        this.#waiting[kept++] = waiting;
      } else {
        this.#start(waiting);
        for (const key of waiting.keys) blocked.add(key);
      }
    }
    this.#waiting.length = kept;
  }

  #start(batch: B): void {
    for (const key of batch.keys) this.#inFlight.set(key, (this.#inFlight.get(key) ?? 0) + 1);
    this.#send(batch);
  }
}
