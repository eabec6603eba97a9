import type { JointEngine, StoreCall } from './engine';

/**
 * The parts of one admission that join one atomic call (see `JOINT` in src/limiter/admit.ts): each
 * part's reservation call joins at its index once its rule is known, or leaves, answered before its
 * turn (a rule function that failed or did not answer in time). Once every part has done one or
 * the other, the calls still unanswered go as one call, in part order. Its methods are all another
 * copy of the library calls, so that two copies loaded side by side still gather together.
 */
export class Gathering {
  readonly #engine: JointEngine;
  #waiting: number;
  readonly #calls: (StoreCall | undefined)[] = [];
  readonly #prepared: unknown[] = [];

  constructor(count: number, engine: JointEngine) {
    this.#waiting = count;
    this.#engine = engine;
  }

  join(index: number, call: StoreCall, prepared: unknown): void {
    this.#calls[index] = call;
    this.#prepared[index] = prepared;
    this.#arrived();
  }

  leave(): void {
    this.#arrived();
  }

  #arrived(): void {
    if (--this.#waiting > 0) return;
    const calls: StoreCall[] = [];
    const prepared: unknown[] = [];
    for (let i = 0; i < this.#calls.length; i++) {
      const call = this.#calls[i];
      // A call whose own deadline passed while it waited for the others was answered by its outage
      // policy: sending it would only spend.
      if (call === undefined || (call as { answered?: boolean }).answered === true) continue;
      calls.push(call);
      prepared.push(this.#prepared[i]);
    }
    if (calls.length > 0) this.#engine.send(calls, prepared);
  }
}
