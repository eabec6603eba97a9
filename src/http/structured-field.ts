import { rangeError, typeError } from '../core/errors';
import { describe } from '../core/validate';

// Serialization of the few RFC 9651 (Structured Fields) types the RateLimit fields use.

/** The largest Integer a structured field may carry: RFC 9651 §3.3.1 allows at most 15 digits. */
const SF_INTEGER_MAX = 999_999_999_999_999;

/** Printable ASCII, the only characters an sf-string may hold (RFC 9651 §3.3.3). */
const SF_STRING_CHARS = /^[\x20-\x7e]+$/;

/** Clamps a non-negative integer to what an sf-integer can carry, so a huge limit still parses. */
export function sfInteger(value: number): number {
  return value < SF_INTEGER_MAX ? value : SF_INTEGER_MAX;
}

/** Serializes an sf-string: quoted, with `"` and `\` escaped by a backslash. */
export function sfString(value: string): string {
  // Names rarely hold either character, and a replace costs more than the rest of the fields.
  if (!value.includes('"') && !value.includes('\\')) return `"${value}"`;
  return `"${value.replace(/["\\]/g, '\\$&')}"`;
}

/**
 * Returns `value` if it can be a policy name: a non-empty string of printable ASCII, the characters
 * an sf-string can carry. Throws a `TypeError` or `RangeError` naming the option otherwise.
 */
export function policyName(name: string, value: unknown): string {
  if (typeof value !== 'string') throw typeError(`ratekeeper: \`${name}\` must be a string, got ${describe(value)}`);
  if (!SF_STRING_CHARS.test(value)) {
    throw rangeError(`ratekeeper: \`${name}\` must be non-empty printable ASCII (a structured-field string), got ${describe(value)}`);
  }
  return value;
}
