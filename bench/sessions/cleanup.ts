/** Teardown that runs however the bench ends: a hung step must not keep the sessions or the server alive. */
import { setTimeout as delay } from 'node:timers/promises';

/** Cleanup steps, run last-registered first, each bounded in time, each failure reported but not fatal. */
export class Cleanup {
  private readonly steps: { name: string; fn: () => Promise<unknown> }[] = [];
  private running?: Promise<void>;

  add(name: string, fn: () => Promise<unknown>): void {
    this.steps.push({ name, fn });
  }

  run(): Promise<void> {
    this.running ??= (async () => {
      for (const step of this.steps.reverse()) {
        try {
          await withTimeout(step.fn(), 30_000, `cleanup: ${step.name}`);
        } catch (error) {
          console.error(`cleanup of ${step.name} failed: ${errorText(error)}`);
        }
      }
    })();
    return this.running;
  }
}

export async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  const abort = new AbortController();
  const timeout = delay(ms, undefined, { signal: abort.signal }).then(() => {
    throw new Error(`${what} did not finish within ${ms} ms`);
  });
  timeout.catch(() => undefined);
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    abort.abort();
  }
}

export function errorText(error: unknown): string {
  return error instanceof Error ? (error.stack ?? error.message) : String(error);
}

/**
 * Runs a bench's `main` with a Cleanup that runs however it ends: on success, on failure and on SIGINT/SIGTERM (the
 * bench handles those itself, so its workers can still stop its sessions), then exits with 0, 1 or 130.
 */
export function runWithCleanup(name: string, main: (cleanup: Cleanup) => Promise<void>): void {
  const cleanup = new Cleanup();
  // Set by a signal: whatever the run was doing then fails, and that is not worth reporting.
  let interrupted = false;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      interrupted = true;
      console.error(`${name}: ${signal}, cleaning up…`);
      void cleanup.run().finally(() => process.exit(130));
    });
  }
  main(cleanup)
    .then(
      () => 0,
      (error: unknown) => {
        if (!interrupted) console.error(`${name} failed: ${errorText(error)}`);
        return 1;
      },
    )
    .then(async (code) => {
      await cleanup.run();
      // The Temporal native runtime can keep the event loop alive after everything is closed.
      process.exit(interrupted ? 130 : code);
    })
    .catch((error: unknown) => {
      console.error(errorText(error));
      process.exit(1);
    });
}
