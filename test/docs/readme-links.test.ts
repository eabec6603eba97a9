import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

// The README is also the package's page on the registry, which shows it without the repository
// around it: a relative link there leads nowhere. Every link and image is absolute, into the
// repository named in package.json, and names a file that exists here.

const readme = readFileSync('README.md', 'utf8');
const { repository, homepage, bugs } = JSON.parse(readFileSync('package.json', 'utf8')) as {
  repository: { url: string };
  homepage: string;
  bugs: { url: string };
};
const repo = repository.url.replace(/^git\+/, '').replace(/\.git$/, '');

describe('README links', () => {
  const targets = [...readme.matchAll(/\]\(([^)\s]+)\)/g)].map((match) => match[1] as string);

  it('package.json names the repository, its page and where to report bugs', () => {
    expect(repo).toMatch(/^https:\/\/github\.com\/[\w-]+\/[\w-]+$/);
    expect(homepage.startsWith(repo)).toBe(true);
    expect(bugs.url).toBe(`${repo}/issues`);
  });

  it('are absolute (or anchors), so that they work on the registry page', () => {
    expect(targets.length).toBeGreaterThan(5);
    expect(targets.filter((target) => !/^(https:\/\/|#)/.test(target))).toEqual([]);
  });

  it('into the repository name files that exist', () => {
    const blob = `${repo}/blob/main/`;
    const raw = `${repo.replace('https://github.com/', 'https://raw.githubusercontent.com/')}/main/`;
    const files = targets.flatMap((target) => (target.startsWith(blob) ? [target.slice(blob.length)] : target.startsWith(raw) ? [target.slice(raw.length)] : []));
    expect(files.length).toBeGreaterThan(5);
    expect(files.filter((file) => !existsSync(file.replace(/#.*$/, '')))).toEqual([]);
  });
});
