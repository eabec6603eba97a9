import { describe, expect, it } from 'vitest';
import { jsdocExamples, markdownExamples } from './extract';

const fence = '```';

describe('finding examples', () => {
  it('takes ```ts blocks from Markdown with the line of their first code line, and the ```text right after', () => {
    const text = [
      '# Title', // 1
      `${fence}sh`, // 2
      'npm install ratekeeper', // 3
      fence, // 4
      `${fence}ts`, // 5
      "console.log('a');", // 6
      fence, // 7
      '', // 8
      `${fence}text`, // 9
      'a', // 10
      fence, // 11
      `${fence}ts no-check`, // 12
      'partial(', // 13
      fence, // 14
      'Prose between.', // 15
      `${fence}text`, // 16
      'not an output', // 17
      fence, // 18
    ].join('\n');
    expect(markdownExamples('README.md', text)).toEqual([
      { source: 'README.md', line: 6, code: "console.log('a');", skipped: false, output: 'a' },
      { source: 'README.md', line: 13, code: 'partial(', skipped: true },
    ]);
  });

  it('takes the ```ts block under each JSDoc @example, and reports one without a block', () => {
    const text = [
      '/**', // 1
      ' * Summary.', // 2
      ' *', // 3
      ' * @example', // 4
      ` * ${fence}ts`, // 5
      " * import { Rule } from 'ratekeeper';", // 6
      ' *', // 7
      ' *   Rule.perSecond(1);', // 8
      ` * ${fence}`, // 9
      ' * @example', // 10
      ' * Rule.perMinute(1);', // 11
      ' */', // 12
    ].join('\n');
    expect(jsdocExamples('src/x.ts', text)).toEqual([
      { source: 'src/x.ts', line: 6, code: "import { Rule } from 'ratekeeper';\n\n  Rule.perSecond(1);", skipped: false },
      { source: 'src/x.ts', line: 10, code: '', skipped: false },
    ]);
  });

  it('refuses an unclosed fence rather than skipping the rest of the file', () => {
    expect(() => markdownExamples('docs/x.md', `${fence}ts\nconst a = 1;\n`)).toThrow(/unclosed code fence opened at line 1/);
    expect(() => jsdocExamples('src/x.ts', ` * @example\n * ${fence}ts\n * const a = 1;\n */\nexport {};`)).toThrow(/not closed/);
  });
});
