// Issue 24's size target: non-blank, non-comment lines of the store code (src/store, src/redis,
// src/postgres) per folder, and the import graph between src's folders.
//
//   node scripts/store-lines.mjs [tree]             one checkout (default: this one)
//   node scripts/store-lines.mjs <before> <after>   two, side by side, with the change
//   --files                                         and each file's count
//
// Lines are read through TypeScript's own parser, so strings, regular expressions and template
// literals can never pass for comments (nor comments for code). A line counts when a token of
// code is on it; `//`, `/* */` and JSDoc are trivia, not tokens. The Lua and SQL the stores send
// live in template literals: a line of one counts unless it is blank or a `--` comment (a line
// with code before its `--` counts). "template text" is the part of the count with such text on it
// (the Lua and SQL, and the odd multi-line message); a line holding only a template's backtick or
// a `${...}` is TypeScript.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const STORE_FOLDERS = ['src/store', 'src/redis', 'src/postgres'];
/** The entry files of the store subpaths: not in the target's folders, listed beside them. */
const STORE_ENTRIES = ['src/redis.ts', 'src/postgres.ts'];

function sourceFiles(dir) {
  let entries;
  try {
    entries = readdirSync(dir);
  } catch {
    return [];
  }
  return entries.flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith('.ts') ? [path] : [];
  });
}

const TEMPLATE_TOKENS = new Set([
  ts.SyntaxKind.NoSubstitutionTemplateLiteral,
  ts.SyntaxKind.TemplateHead,
  ts.SyntaxKind.TemplateMiddle,
  ts.SyntaxKind.TemplateTail,
]);

/** Every token of the file (the leaves of the syntax tree), JSDoc left out. */
function* tokens(node, file) {
  if (node.kind >= ts.SyntaxKind.FirstJSDocNode && node.kind <= ts.SyntaxKind.LastJSDocNode) return;
  const children = node.getChildren(file);
  if (children.length === 0) {
    if (node.end > node.getStart(file)) yield node;
    return;
  }
  for (const child of children) yield* tokens(child, file);
}

/** Counts one file: lines with TypeScript code, and lines of Lua/SQL text with code. */
function countFile(path) {
  const text = readFileSync(path, 'utf8');
  const file = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const lineOf = (pos) => file.getLineAndCharacterOfPosition(pos).line;
  const code = new Set();
  const embedded = new Set();
  for (const token of tokens(file, file)) {
    const start = token.getStart(file);
    if (!TEMPLATE_TOKENS.has(token.kind)) {
      for (let line = lineOf(start); line <= lineOf(token.end); line++) code.add(line);
      continue;
    }
    // A template piece's delimiters (backtick, `}`, `${`) are TypeScript; a line with Lua or SQL
    // text on it, other than a `--` comment, is embedded code.
    code.add(lineOf(start));
    code.add(lineOf(token.end));
    const closer = token.kind === ts.SyntaxKind.TemplateHead || token.kind === ts.SyntaxKind.TemplateMiddle ? 2 : 1;
    const lines = text.slice(start + 1, token.end - closer).split('\n');
    lines.forEach((line, i) => {
      const trimmed = line.trim();
      if (trimmed !== '' && !trimmed.startsWith('--')) embedded.add(lineOf(start) + i);
    });
  }
  for (const line of embedded) code.add(line);
  return { code: code.size, embedded: embedded.size };
}

/** The node of the import graph a file belongs to: its folder under src, or the entry file itself (src/redis.ts). */
function graphNode(root, path) {
  const parts = relative(join(root, 'src'), path).split(sep);
  return `src/${parts[0]}`;
}

/** Relative imports and re-exports of a file, resolved as the bundler resolves them. */
function importsOf(path) {
  const file = ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const found = [];
  for (const statement of file.statements) {
    const specifier = (ts.isImportDeclaration(statement) || ts.isExportDeclaration(statement)) && statement.moduleSpecifier;
    if (!specifier || !ts.isStringLiteral(specifier) || !specifier.text.startsWith('.')) continue;
    const typeOnly = ts.isImportDeclaration(statement) ? statement.importClause?.isTypeOnly === true : statement.isTypeOnly;
    const base = resolve(dirname(path), specifier.text);
    const target = [`${base}.ts`, join(base, 'index.ts'), base].find((candidate) => {
      try {
        return statSync(candidate).isFile();
      } catch {
        return false;
      }
    });
    if (target === undefined) throw new Error(`store-lines: ${path} imports ${specifier.text}, which resolves to no file`);
    found.push({ target, typeOnly });
  }
  return found;
}

function measureTree(root) {
  const folders = [...STORE_FOLDERS, ...STORE_ENTRIES].map((name) => {
    const path = join(root, name);
    const files = name.endsWith('.ts') ? sourceFiles(dirname(path)).filter((file) => file === path) : sourceFiles(path);
    const counts = files.map(countFile);
    return {
      name,
      files: files.length,
      perFile: files.map((file, i) => ({ file: relative(root, file), ...counts[i] })),
      code: counts.reduce((sum, c) => sum + c.code, 0),
      embedded: counts.reduce((sum, c) => sum + c.embedded, 0),
    };
  });
  const edges = new Map();
  for (const path of sourceFiles(join(root, 'src'))) {
    const from = graphNode(root, path);
    for (const { target, typeOnly } of importsOf(path)) {
      const to = graphNode(root, target);
      if (to === from) continue;
      const key = `${from} -> ${to}`;
      const edge = edges.get(key) ?? { from, to, imports: 0, typeOnly: 0, files: new Set() };
      edge.imports++;
      if (typeOnly) edge.typeOnly++;
      edge.files.add(path);
      edges.set(key, edge);
    }
  }
  return { root, folders, edges: [...edges.values()].sort((a, b) => a.from.localeCompare(b.from) || a.to.localeCompare(b.to)) };
}

function table(rows) {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => String(row[i]).length)));
  return rows.map((row) => row.map((cell, i) => (i === 0 ? String(cell).padEnd(widths[i]) : String(cell).padStart(widths[i]))).join('  ')).join('\n');
}

const folderTotal = (tree) => tree.folders.filter((f) => STORE_FOLDERS.includes(f.name)).reduce((sum, f) => sum + f.code, 0);

function printTree(tree) {
  console.log(`# ${tree.root}\n`);
  const rows = [['folder', 'files', 'code lines', 'of which template text (Lua, SQL)']];
  for (const f of tree.folders) rows.push([f.name, f.files, f.code, f.embedded]);
  rows.push([STORE_FOLDERS.join(' + '), '', folderTotal(tree), '']);
  console.log(`${table(rows)}\n`);
  if (perFile) {
    const files = [['file', 'code lines', 'of which template text (Lua, SQL)']];
    for (const f of tree.folders) for (const each of f.perFile) files.push([each.file, each.code, each.embedded]);
    console.log(`${table(files)}\n`);
  }
  const graph = [['imports between src folders', 'import statements', 'import type', 'files']];
  for (const e of tree.edges) graph.push([`${e.from} -> ${e.to}`, e.imports, e.typeOnly, e.files.size]);
  console.log(`${table(graph)}\n`);
}

function printChange(before, after) {
  console.log('# before -> after (code lines)\n');
  const change = (a, b) => (a === 0 ? '—' : `${(((b - a) / a) * 100).toFixed(1)}%`);
  const rows = [['folder', 'before', 'after', 'change']];
  for (const f of before.folders) {
    const other = after.folders.find((g) => g.name === f.name);
    rows.push([f.name, f.code, other.code, change(f.code, other.code)]);
  }
  rows.push([STORE_FOLDERS.join(' + '), folderTotal(before), folderTotal(after), change(folderTotal(before), folderTotal(after))]);
  console.log(table(rows));
}

const perFile = process.argv.includes('--files');
const trees = process.argv.slice(2).filter((arg) => arg !== '--files');
if (trees.length > 2) throw new Error(`store-lines: at most two trees (before, after), got ${trees.length}`);
const roots = trees.length === 0 ? [fileURLToPath(new URL('..', import.meta.url))] : trees.map((tree) => resolve(tree));
const measured = roots.map(measureTree);
for (const tree of measured) printTree(tree);
if (measured.length === 2) printChange(measured[0], measured[1]);
