import { defineConfig } from 'tsup';
import { exports } from './package.json';

// One entry per public subpath, read from package.json's exports map (`.` is src/index.ts, `./redis`
// src/redis.ts): a new subpath is its block in `exports` and its entry file, and nothing else
// (typesVersions maps every subpath for `moduleResolution: node10` by a wildcard).
const entry = Object.keys(exports)
  .filter((subpath) => subpath !== './package.json')
  .map((subpath) => (subpath === '.' ? 'src/index.ts' : `src/${subpath.slice(2)}.ts`));

export default defineConfig({
  entry,
  format: ['esm', 'cjs'],
  dts: true,
  clean: true,
  target: 'es2022',
  platform: 'neutral',
});
