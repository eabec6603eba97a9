// What the public classes share: printing a summary under `util.inspect`, and `close()` under
// `using`. Both hang on symbols, kept in two small base classes: a method with a computed key that is
// not a `Symbol.<name>` keeps a class in every bundle, used or not, so the keys are written once, here.

declare global {
  // The two well-known symbols as lib.esnext.disposable and @types/node declare them (identical
  // declarations merge), so that these types compile for a project whose lib has neither.
  interface SymbolConstructor {
    readonly dispose: unique symbol;
    readonly asyncDispose: unique symbol;
  }
}

/** `Symbol.dispose`, or where the runtime lacks it, the registered symbol transpilers use in its place. */
const disposeSymbol: typeof Symbol.dispose = Symbol.dispose ?? (Symbol.for('Symbol.dispose') as typeof Symbol.dispose);

/** `Symbol.asyncDispose`, or where the runtime lacks it, the registered symbol transpilers use in its place. */
const asyncDisposeSymbol: typeof Symbol.asyncDispose = Symbol.asyncDispose ?? (Symbol.for('Symbol.asyncDispose') as typeof Symbol.asyncDispose);

/** The key Node's `util.inspect` (and `console.log`) looks for, by its registered name: the core imports nothing from Node. */
const inspectSymbol: unique symbol = Symbol.for('nodejs.util.inspect.custom');

/**
 * A public class that `console.log` and `util.inspect` print as its name and its `toJSON()` summary
 * (the rule, the size), styled as Node styles any object, instead of its private state.
 */
export abstract class Printable {
  /** A summary for logs and `JSON.stringify`: settings and sizes, never a client, a key or scaled internals. */
  abstract toJSON(): object;

  [inspectSymbol](_depth: number, options: unknown, inspect: unknown): string {
    const summary = this.toJSON();
    const body = typeof inspect === 'function' ? (inspect as (value: unknown, options: unknown) => string)(summary, options) : JSON.stringify(summary);
    return `${this.constructor.name} ${body}`;
  }
}

/** A public class that holds waiters: `using` and `await using` call its `close()`. */
export abstract class Closable extends Printable {
  /** Ends every wait and clears every timer; see each class. */
  abstract close(): void;

  /** `close()`, for `using`. */
  [disposeSymbol](): void {
    this.close();
  }

  /** `close()`, for `await using`. */
  [asyncDisposeSymbol](): Promise<void> {
    this.close();
    return Promise.resolve();
  }
}
