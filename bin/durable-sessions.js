#!/usr/bin/env node
'use strict';
// Runs the compiled CLI (dist/, built by `npm run build`, which `npm ci` runs as `prepare`): no TypeScript compiler
// at run time. In a clone whose sources changed after the build, it runs the sources through tsx instead (slower, by
// a second or so), so that an edit is never run stale; an installed package has no sources and always runs dist/.
const fs = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const compiled = path.join(root, 'dist', 'cli', 'main.js');
const sources = path.join(root, 'src');

/** The newest modification time under `dir` (a clone's src/ is a few hundred files: a couple of milliseconds). */
function newestMtime(dir) {
  let newest = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtime(p) : fs.statSync(p).mtimeMs);
  }
  return newest;
}

function compiledIsCurrent() {
  let built;
  try {
    built = fs.statSync(compiled).mtimeMs;
  } catch {
    return false;
  }
  return !fs.existsSync(sources) || newestMtime(sources) <= built;
}

let cliMain;
if (compiledIsCurrent()) {
  ({ cliMain } = require(compiled));
} else {
  require('tsx/cjs');
  ({ cliMain } = require('../src/cli/main.ts'));
}
cliMain(process.argv.slice(2)).then((code) => process.exit(code));
