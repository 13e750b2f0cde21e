/**
 * How the session workflows are bundled, by the worker from source and by the tests and benchmarks that bundle ahead:
 * every bundle must share the same modules across workflows (see src/workflows/preload.ts), or what is measured and
 * tested is not what runs.
 */
export const SESSION_WORKFLOWS: { readonly workflowsPath: string; readonly preloadModules: string[] } = {
  workflowsPath: require.resolve('./workflows'),
  preloadModules: [require.resolve('./workflows/preload')],
};
