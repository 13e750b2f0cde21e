#!/usr/bin/env node
// Runs the TypeScript CLI directly (through tsx), so the command works from a clone without a build step.
require('tsx/cjs');
const { cliMain } = require('../src/cli/main.ts');
cliMain(process.argv.slice(2)).then((code) => process.exit(code));
