/** Calls of one group may share a batch: a hash slot on a Redis Cluster, and under rules per key a rule too. */
export type Group = number | string;

/** A batch's turn in its round: the sender calls {@link release} once the batch is answered (any number of times). */
export interface Flight {
  release(): void;
}

/** What the coalescer needs of a call: whether it already has its answer (say, from its timeout). */
export interface Waiting {
  readonly answered: boolean;
}

/**
 * Sends calls to a store in batches, batching across callbacks: a call that finds nothing in flight
 * goes at once, with the other calls of its tick (in a microtask, so no call waits for a timer and
 * a quiet server adds no latency); a call that finds a round in flight waits for it to come back,
 * whatever tick it arrives in, and then goes with every call that waited meanwhile. So under load
 * each round trip carries the calls that arrived during the one before, and batches grow with the
 * load by themselves. A batch that fills up (`maxBatch` calls of one group) goes at once, round or
 * not (when the sends keep their order): it gains nothing by waiting, and the store runs it while
 * the round is still out.
 *
 * A round is one send of everything that waited: a batch per group, each under `maxBatch` calls,
 * which bounds how long one script holds the store. A group is a hash slot on a Redis Cluster, where
 * one script may only touch keys of one slot, and a single group elsewhere. The round ends once each
 * of its batches has been answered or released by a timeout, so a server that does not answer
 * holds the waiting calls no longer than the bound.
 *
 * One round in flight, not more: more rounds in flight raise the decisions/s of a few callers but
 * make the batches of a CPU-bound HTTP server smaller, costing it more CPU per request than they
 * save (bench/HISTORY.md; docs/redis.md, "When calls are batched").
 *
 * Calls wait and leave in the order they were made and one client sends the batches in that order,
 * so calls on one key reach the store in the order they were made. A call answered while it waited
 * (its timeout passed) is not sent: it would spend permits for an answer nobody reads.
 */
export class Coalescer<T extends Waiting> {
  readonly #send: (batch: T[], flight: Flight) => void;
  readonly #maxBatch: number;
  readonly #fullGoesAtOnce: boolean;
  /** Calls not yet sent, by group, in the order made. */
  readonly #waiting = new Map<Group, T[]>();
  #inFlight = false;
  #scheduled = false;

  /**
   * `send` sends one batch and calls `flight.release()` once it is answered. `fullGoesAtOnce`: a full
   * batch goes beside the round, when batches sent apart still reach the store in order (one
   * connection, or an order kept by the sender); otherwise it waits for the round like the rest.
   */
  constructor(send: (batch: T[], flight: Flight) => void, maxBatch: number, fullGoesAtOnce: boolean) {
    this.#send = send;
    this.#maxBatch = maxBatch;
    this.#fullGoesAtOnce = fullGoesAtOnce;
  }

  add(call: T, group: Group): void {
    let waiting = this.#waiting.get(group);
    if (waiting === undefined) this.#waiting.set(group, (waiting = []));
    waiting.push(call);
    if (waiting.length === this.#maxBatch && this.#fullGoesAtOnce) {
      // A full batch gains nothing by waiting: it goes now, outside the round, holding nothing back.
      this.#waiting.delete(group);
      this.#send(waiting.filter(unanswered), new InFlight());
    } else if (!this.#inFlight) {
      this.#schedule();
    }
  }

  /** The round's batches were all answered: the calls that waited meanwhile may go. */
  roundEnded(): void {
    this.#inFlight = false;
    // Scheduled after the round's callers were resolved, so the calls their code makes in the same
    // tick go too.
    if (this.#waiting.size > 0) this.#schedule();
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    RESOLVED.then(this.#flush);
  }

  readonly #flush = (): void => {
    this.#scheduled = false;
    // A group holds more than maxBatch calls only when full batches wait: it goes as several.
    const batches: T[][] = [];
    for (const waiting of this.#waiting.values()) {
      const calls = waiting.every(unanswered) ? waiting : waiting.filter(unanswered);
      for (let i = 0; i < calls.length; i += this.#maxBatch) batches.push(calls.length <= this.#maxBatch ? calls : calls.slice(i, i + this.#maxBatch));
    }
    this.#waiting.clear();
    if (batches.length === 0) return;
    this.#inFlight = true;
    const round = new Round(this, batches.length);
    for (const batch of batches) this.#send(batch, new InFlight(round));
  };
}

/**
 * The flush goes in a promise reaction rather than `queueMicrotask`, which in Node wraps every
 * callback in an AsyncResource, a visible part of what a lone call costs (bench/HISTORY.md).
 */
const RESOLVED = Promise.resolve();

const unanswered = (call: Waiting): boolean => !call.answered;

/** The batches sent together; the round ends once each has been answered. */
class Round {
  readonly coalescer: { roundEnded(): void };
  unanswered: number;

  constructor(coalescer: { roundEnded(): void }, batches: number) {
    this.coalescer = coalescer;
    this.unanswered = batches;
  }
}

/** One batch in flight; {@link release} ends its turn, once, however often it is called. */
export class InFlight implements Flight {
  readonly #round: Round | undefined;
  #released = false;

  /** Without a round (a call sent alone when batching is off), releasing does nothing. */
  constructor(round?: Round) {
    this.#round = round;
  }

  release(): void {
    if (this.#released || this.#round === undefined) return;
    this.#released = true;
    if (--this.#round.unanswered === 0) this.#round.coalescer.roundEnded();
  }
}
