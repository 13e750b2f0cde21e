// @ts-check
const tseslint = require('typescript-eslint');
const importX = require('eslint-plugin-import-x');
const { builtinModules } = require('node:module');

module.exports = tseslint.config(
  { ignores: ['node_modules/', 'dist/', 'data/', '.tools/', 'coverage/', 'bin/', '*.config.js'] },
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: __dirname } },
    plugins: { 'import-x': importX },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
      '@typescript-eslint/restrict-template-expressions': [
        'error',
        { allowNumber: true, allowBoolean: true, allowNullish: true },
      ],
      'import-x/no-cycle': 'error',
      // Async functions that need no await still state their contract (activities, interface methods).
      '@typescript-eslint/require-await': 'off',
    },
  },
  {
    // The snapshot layer has one front door: src/snapshots/index.ts. Its own tests may reach inside; the benchmarks of
    // its stages have their own, narrower rule below. Keep this block first: a later no-restricted-imports for the same
    // files replaces this one (the bench block, and the workflow block, which forbids the snapshot layer outright).
    files: ['**/*.ts'],
    ignores: ['src/snapshots/**', 'test/snapshots/**'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              // keys.ts: the keyring alone, for the payload codec of clients (no engine loaded); archive.ts: export
              // and import, for clients that stream an archive through any store (no engine loaded either).
              group: ['**/snapshots/*', '!**/snapshots/keys', '!**/snapshots/archive'],
              message: 'Import the snapshot layer from its front door (src/snapshots/index.ts), not its modules.',
            },
          ],
        },
      ],
    },
  },
  {
    // The benchmarks of the engine's stages measure internals the front door does not expose: those, and only
    // those, they may import directly.
    files: [
      'bench/engine.ts',
      'bench/codec.ts',
      'bench/chunker.ts',
      'bench/crypto.ts',
      'bench/bounded.ts',
      'bench/timeline.ts',
    ],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: [
                '**/snapshots/*',
                '!**/snapshots/engine',
                '**/snapshots/engine/*',
                '!**/snapshots/engine/chunker',
                '!**/snapshots/engine/chunk-pool',
                '!**/snapshots/engine/codec',
                '!**/snapshots/engine/crypto',
                '!**/snapshots/engine/native-sealer',
                '!**/snapshots/timeline-log',
                '!**/snapshots/timeline-objects',
                '!**/snapshots/blob',
                '**/snapshots/blob/*',
                '!**/snapshots/blob/fs-backend',
              ],
              message: 'Benchmarks import the snapshot layer from its front door, except the stages they measure.',
            },
          ],
        },
      ],
    },
  },
  {
    // Workflow code runs in Temporal's deterministic sandbox: no Node built-ins, no I/O, no activities'
    // implementations (types only).
    files: ['src/workflows/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [...builtinModules, ...builtinModules.map((m) => `node:${m}`)].map((name) => ({
            name,
            message: 'Workflow code runs in the Temporal sandbox: Node built-ins are not available there.',
          })),
          patterns: [
            {
              group: ['**/activities', '**/activities/*'],
              allowTypeImports: true,
              message: 'Import activities as types only.',
            },
            {
              group: ['**/snapshots', '**/snapshots/*', '**/runtimes', '**/runtimes/*', '**/client', '**/client/*'],
              message: 'Workflow code may import only @temporalio/workflow, src/api and src/domain.',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/unbound-method': 'off',
      // expect.any(), expect.objectContaining() and parsed YAML are typed any by their libraries.
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-base-to-string': 'off',
    },
  },
  {
    // Plain CommonJS (a preload that runs before any TypeScript loader): no type information to check it with.
    files: ['**/*.cjs'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: {
      ...tseslint.configs.disableTypeChecked.languageOptions,
      sourceType: 'commonjs',
      globals: { require: 'readonly', performance: 'readonly' },
    },
    rules: { ...tseslint.configs.disableTypeChecked.rules, '@typescript-eslint/no-require-imports': 'off' },
  },
);
