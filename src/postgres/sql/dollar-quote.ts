/**
 * Stands for the dollar quote around each function body in the migration's text, until
 * {@link dollarQuoted} picks the quote: U+0000, which no schema name (refused by `quotedSchema`) and
 * no PostgreSQL text can hold.
 */
export const QUOTE = '\u0000';

/**
 * `text` with every {@link QUOTE} replaced by one dollar quote that occurs nowhere else in it: the
 * schema's name is written into the function bodies, and a name holding `$$` or `$fn$` would
 * otherwise end a body where it stands.
 */
export function dollarQuoted(text: string): string {
  let tag = '$rk$';
  for (let n = 1; text.includes(tag); n++) tag = `$rk${n}$`;
  return text.replaceAll(QUOTE, tag);
}
