// Finds the code examples in Markdown and in JSDoc, remembering where each came from so a
// compiler error can be reported against the README or source line a reader would fix.

/** The info-string word that opts a ```ts block out of the compile check: ```ts no-check */
export const NO_CHECK = 'no-check';

export interface Example {
  /** Where the example lives, relative to the repository root. */
  readonly source: string;
  /** 1-based line in `source` of the example's first code line. */
  readonly line: number;
  readonly code: string;
  /** Opted out with ```ts no-check. */
  readonly skipped: boolean;
  /** The ```text block right after it, when there is one: what running the example prints. */
  readonly output?: string;
}

interface Fence {
  readonly lang: string;
  readonly info: string;
  readonly line: number;
  readonly code: string;
  /** Only blank lines separate this fence from the previous one. */
  readonly adjacent: boolean;
}

/** Every fenced block of a Markdown text, in order. */
function fences(text: string): Fence[] {
  const lines = text.split('\n');
  const found: Fence[] = [];
  let lastEnd = -2;
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w*)[ \t]*(.*)$/.exec(lines[i] as string);
    if (open === null) continue;
    const start = i + 1;
    let end = start;
    while (end < lines.length && !/^```\s*$/.test(lines[end] as string)) end++;
    if (end === lines.length) throw new Error(`unclosed code fence opened at line ${i + 1}`);
    const between = lines.slice(lastEnd + 1, i);
    found.push({
      lang: open[1] as string,
      info: (open[2] as string).trim(),
      line: start + 1,
      code: lines.slice(start, end).join('\n'),
      adjacent: lastEnd >= 0 && between.every((line) => line.trim() === ''),
    });
    lastEnd = end;
    i = end;
  }
  return found;
}

const isTs = (lang: string) => lang === 'ts' || lang === 'typescript';

/** The ```ts blocks of a Markdown file, each with the ```text block that directly follows it, if any. */
export function markdownExamples(source: string, text: string): Example[] {
  const all = fences(text);
  return all.flatMap((fence, i) => {
    if (!isTs(fence.lang)) return [];
    const next = all[i + 1];
    const output = next?.lang === 'text' && next.adjacent ? next.code : undefined;
    const skipped = fence.info.split(/\s+/).includes(NO_CHECK);
    return [{ source, line: fence.line, code: fence.code, skipped, ...(output === undefined ? {} : { output }) }];
  });
}

/**
 * The ```ts blocks under each `@example` tag of the JSDoc comments in a source file. An `@example`
 * without such a block is returned with empty code, so the test can refuse it rather than skip it.
 */
export function jsdocExamples(source: string, text: string): Example[] {
  const lines = text.split('\n');
  const found: Example[] = [];
  // A comment line's text after its leading `*`; undefined once the comment has ended.
  const body = (line: string | undefined) => (line === undefined || line.includes('*/') ? undefined : /^\s*\* ?(.*)$/.exec(line)?.[1]);
  for (let i = 0; i < lines.length; i++) {
    if (!/^\s*\*\s*@example\b/.test(lines[i] as string)) continue;
    const open = /^```(\w*)[ \t]*(.*)$/.exec(body(lines[i + 1]) ?? '');
    if (open === null || !isTs(open[1] as string)) {
      found.push({ source, line: i + 1, code: '', skipped: false });
      continue;
    }
    const code: string[] = [];
    let j = i + 2;
    for (; j < lines.length; j++) {
      const line = body(lines[j]);
      if (line === undefined) throw new Error(`${source}:${i + 1}: @example block not closed inside its comment`);
      if (/^```\s*$/.test(line)) break;
      code.push(line);
    }
    found.push({ source, line: i + 3, code: code.join('\n'), skipped: (open[2] as string).split(/\s+/).includes(NO_CHECK) });
    i = j;
  }
  return found;
}

/** A file name for an example that says where it came from: `README.md:23` → `README.md-L23.ts`. */
export const fileNameOf = (example: Example) => `${example.source.replaceAll('/', '__')}-L${example.line}.ts`;
