import { defineConfig } from 'tsup';

export default defineConfig({
  entry: ['src/index.ts', 'src/redis.ts', 'src/http.ts'],
  format: ['esm', 'cjs'],
  dts: true,
  clean: true,
  target: 'es2022',
  platform: 'neutral',
});
