/** Small statistics and formatting helpers shared by every bench module. */

export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/** The median of per-round ratios `a[i] / b[i]`: each ratio compares two figures taken moments apart. */
export function ratioMedian(a: readonly number[] | undefined, b: readonly number[] | undefined): number {
  if (a === undefined || b === undefined || a.length === 0 || a.length !== b.length) return NaN;
  return median(a.map((x, i) => x / (b[i] as number)));
}

/** The value at quantile `q` (0..1) of an ascending-sorted array, nearest rank. */
export function quantileSorted(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank] as number;
}

export function formatNumber(value: number, digits = 0): string {
  if (!Number.isFinite(value)) return '—';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits }).replace(/,/g, ' ');
}

export function formatRatio(value: number): string {
  return Number.isFinite(value) ? `${value.toFixed(2)}×` : '—';
}

/** Decisions per second from nanoseconds per operation, rounded to thousands. */
export function opsPerSecond(nsPerOp: number): string {
  return Number.isFinite(nsPerOp) ? `${formatNumber(1e9 / nsPerOp / 1e6, 2)} M` : '—';
}

/** A markdown table; the first row is the header. */
export function markdownTable(rows: readonly (readonly string[])[]): string {
  const [header, ...body] = rows;
  if (header === undefined) return '';
  const line = (cells: readonly string[]) => `| ${cells.join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...body.map(line)].join('\n');
}

/** The same rows as aligned plain text, for the terminal. */
export function textTable(rows: readonly (readonly string[])[]): string {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows.map((row) => row.map((cell, i) => cell.padEnd(widths[i] ?? 0)).join('  ').trimEnd()).join('\n');
}
