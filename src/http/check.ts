import { rangeError, typeError } from '../core/errors';
import { assertNumber, describe } from '../core/validate';

// Checks shared by the header formatter and the middleware options. Messages follow the core's:
// they name the option and echo the bad value.

/** Returns `value` if it is one of `choices`; throws a `TypeError` or `RangeError` listing them otherwise. */
export function oneOf<T>(name: string, value: unknown, choices: readonly T[]): T {
  if (choices.includes(value as T)) return value as T;
  const listed = choices.map((choice) => (typeof choice === 'string' ? `'${choice}'` : String(choice)));
  const expected = `${listed.slice(0, -1).join(', ')} or ${listed.at(-1)}`;
  const message = `ratekeeper: \`${name}\` must be ${expected}, got ${describe(value)}`;
  throw typeof value === typeof choices[0] ? rangeError(message) : typeError(message);
}

/** Throws a `TypeError` unless `value` is a function or undefined. */
export function optionalFunction(name: string, value: unknown): void {
  if (value !== undefined && typeof value !== 'function') {
    throw typeError(`ratekeeper: \`${name}\` must be a function, got ${describe(value)}`);
  }
}

/** Throws a `TypeError` unless `value` is a non-null object. */
export function assertObject(name: string, value: unknown): asserts value is object {
  if (value === null || typeof value !== 'object') {
    throw typeError(`ratekeeper: ${name} must be an object, got ${describe(value)}`);
  }
}

/** Returns `value` if it is a positive finite number; throws a `TypeError` or `RangeError` naming it otherwise. */
export function positiveNumber(name: string, value: unknown): number {
  assertNumber(name, value);
  if (!(value > 0 && value < Infinity)) {
    throw rangeError(`ratekeeper: \`${name}\` must be a positive finite number, got ${value}`);
  }
  return value;
}
