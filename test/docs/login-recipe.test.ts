// docs/recipes.md "Login protection", run as written against concurrent guesses: however many
// arrive together, at most the limit reach the password check.
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import express from 'express';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import * as ratekeeper from '../../src/index';
import * as http from '../../src/http';
import { markdownExamples } from './extract';

const LIMIT = 10; // the recipe's limit per username and address
const GUESSES = 50;

/** The recipe's Express app, its imports bound to the sources and its password check to `check`. */
function recipeApp(check: (user: string, password: string) => Promise<boolean>): express.Express {
  const path = 'docs/recipes.md';
  const examples = markdownExamples(path, readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8'));
  const recipe = examples.find((e) => e.code.includes("app.post('/login'"));
  if (recipe === undefined) throw new Error('docs/recipes.md has no login recipe');
  const { outputText } = ts.transpileModule(`${recipe.code}\nmodule.exports.app = app;`, {
    compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true },
  });
  const modules: Record<string, unknown> = { express, ratekeeper, 'ratekeeper/http': http };
  const module = { exports: {} as { app?: express.Express } };
  const require = (name: string) => modules[name];
  // `declare function passwordIsRight` compiles to nothing: the recipe's calls find it as a parameter here.
  new Function('require', 'module', 'exports', 'passwordIsRight', outputText)(require, module, module.exports, check);
  return module.exports.app as express.Express;
}

describe('the login recipe (docs/recipes.md)', () => {
  it(`checks at most ${LIMIT} of ${GUESSES} concurrent wrong guesses, and refuses the rest with 429`, async () => {
    let checked = 0;
    let refused = 0;
    // Every check waits until each guess has been checked or refused: all of them are in flight at
    // once, as an attacker's would be. A recipe that let more through would check them all.
    let open: () => void = () => {};
    const allIn = new Promise<void>((resolve) => (open = resolve));
    const settled = () => {
      if (checked + refused === GUESSES) open();
    };
    const app = express();
    app.use((_req, res, next) => {
      res.on('finish', () => {
        if (res.statusCode === 429) {
          refused++;
          settled();
        }
      });
      next();
    });
    app.use(
      recipeApp(async () => {
        checked++;
        settled();
        await allIn;
        return false;
      }),
    );
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const statuses = await Promise.all(
        Array.from({ length: GUESSES }, () =>
          fetch(`http://127.0.0.1:${port}/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ user: 'alice', password: 'wrong' }) }).then(
            (response) => response.status,
          ),
        ),
      );
      expect(checked).toBe(LIMIT);
      expect(statuses.filter((s) => s === 401)).toHaveLength(LIMIT);
      expect(statuses.filter((s) => s === 429)).toHaveLength(GUESSES - LIMIT);
      // The tenth failure locked the pair out: a right password is not even checked now.
      const after = await fetch(`http://127.0.0.1:${port}/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ user: 'alice', password: 'right' }) });
      expect(after.status).toBe(429);
      expect(checked).toBe(LIMIT);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
