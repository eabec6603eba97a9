import type { Rule } from '../core/rule';

// Every store key is built here, so that a change of layout (issue 24: no rule in the key, with the
// legacy key read once on upgrade) happens in one place for every engine.

/**
 * What every key of a limiter starts with under `rule`: its store key is this plus the caller's
 * key. It embeds the rule, `prefix + (name + ':')? + algorithm + ':' + limit + '/' + windowMs + ':'`
 * (the layout the previous versions wrote keys under; PostgreSQL had no `name`), so that a layer's
 * store key names its rule; the engines leave the rule out of the key they store under.
 */
export function storeNamespace(prefix: string, name: string | undefined, algorithm: string, rule: Rule): string {
  return `${ruleFreeNamespace(prefix, name, algorithm)}${rule.limit}/${rule.windowMs}:`;
}

/**
 * The part of every namespace that no rule changes: `prefix + (name + ':')? + algorithm + ':'`. A
 * limiter whose rule is a function of the key claims it (see claimNamespace): whatever rule a key
 * gets, its store key starts with it.
 */
export function ruleFreeNamespace(prefix: string, name: string | undefined, algorithm: string): string {
  return `${prefix}${name === undefined ? '' : `${name}:`}${algorithm}:`;
}
