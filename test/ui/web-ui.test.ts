import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { sessionWorkflowId } from '../../src/api';
import { freePort, startDevServer, type DevServer } from '../../src/dev-server';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * The Temporal Web UI as a console for sessions, driven in a real headless Chromium: find paused sessions by their
 * search attribute, read a session's summary and current details, run its `status` query and send it a `resume`
 * update, the way an operator would. Debian's chromium (scripts/install-chromium.sh); playwright-core brings none.
 */
const CHROMIUM = '/usr/bin/chromium';
const haveChromium = fs.existsSync(CHROMIUM);
if (!haveChromium) {
  console.warn(
    `skipping the Web UI test: no browser at ${CHROMIUM} (scripts/install-chromium.sh, run by npm test, installs Debian's chromium there as root with apt-get)`,
  );
}
/** How long one step in the browser may take: the UI polls the server, a cold page load takes a few seconds. */
const STEP_MS = 20_000;

let server: DevServer;
let sys: TestSystem;
let browser: Browser | undefined;
let page: Page;
let screenshots: string;
let passed = false;

(haveChromium ? describe : describe.skip)('Temporal Web UI', () => {
  beforeAll(async () => {
    // The run's shared dev server is headless: this one serves the Web UI, on loopback.
    server = await startDevServer({ port: await freePort(), uiPort: await freePort() });
    const uiUrl = server.uiUrl!;
    // The UI server comes up beside the frontend, not necessarily with it.
    await eventually(async () => (await fetch(uiUrl)).ok, STEP_MS);
    sys = await startTestSystem({ address: server.address });
    screenshots = process.env.DS_UI_SCREENSHOTS ?? fs.mkdtempSync(path.join(os.tmpdir(), 'ds-web-ui-'));
    fs.mkdirSync(screenshots, { recursive: true });
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, timeout: 30_000 });
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, baseURL: uiUrl });
    context.setDefaultTimeout(STEP_MS);
    // Loopback only: whatever else the page asks for is refused rather than fetched.
    await context.route(
      (url) => url.hostname !== '127.0.0.1',
      (route) => route.abort(),
    );
    page = await context.newPage();
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await sys?.close();
    await server?.stop();
    if (passed && !process.env.DS_UI_SCREENSHOTS) fs.rmSync(screenshots, { recursive: true, force: true });
    else if (screenshots) console.log(`Web UI screenshots: ${screenshots}`);
  });

  test('lists paused sessions by SessionState, shows summary and details, runs status, sends resume', async () => {
    const suffix = crypto.randomUUID().slice(0, 8);
    const pausedId = `ui-paused-${suffix}`;
    const runningId = `ui-running-${suffix}`;
    const paused = await sys.sessions.start({ sessionId: pausedId, runtime: { kind: 'memory', initialState: 'a' } });
    const running = await sys.sessions.start({ sessionId: runningId, runtime: { kind: 'memory', initialState: 'b' } });
    await runningStatus(paused);
    await runningStatus(running);
    await paused.pause({ reason: 'web ui test' });
    // Visibility follows the workflow's upsert: the UI's list is asked only once the server's answers.
    await eventually(async () => {
      for await (const w of sys.client.workflow.list({
        query: `SessionState="paused" AND WorkflowId="${sessionWorkflowId(pausedId)}"`,
      }))
        return w;
    });

    // The list, filtered by the query in the URL: the paused session only.
    const pausedWorkflow = sessionWorkflowId(pausedId);
    const runningWorkflow = sessionWorkflowId(runningId);
    await page.goto(`/namespaces/default/workflows?query=${encodeURIComponent('SessionState="paused"')}`);
    const pausedLink = page.getByRole('link', { name: pausedWorkflow, exact: true });
    await pausedLink.waitFor();
    // The rows come in one answer: with the paused one shown, a missing running one is really left out.
    expect(await page.getByRole('link', { name: runningWorkflow, exact: true }).count()).toBe(0);
    await page.screenshot({ path: path.join(screenshots, 'list-paused.png') });

    // The same list, asked for running sessions, has the other one: the filter is what leaves it out above.
    await page.goto(`/namespaces/default/workflows?query=${encodeURIComponent('SessionState="running"')}`);
    await page.getByRole('link', { name: runningWorkflow, exact: true }).waitFor();
    expect(await page.getByRole('link', { name: pausedWorkflow, exact: true }).count()).toBe(0);

    // The session's page: the static summary SessionClient sets, the current details the workflow keeps.
    await page.goto(`/namespaces/default/workflows?query=${encodeURIComponent('SessionState="paused"')}`);
    await page.getByRole('link', { name: pausedWorkflow, exact: true }).click();
    await page.getByTestId('user-metadata-tab').click();
    await waitForText(page, `memory · ${pausedId}`);
    await waitForText(page, 'paused · memory runtime');
    await page.screenshot({ path: path.join(screenshots, 'session-metadata.png') });

    // The Queries tab runs `status`: its JSON answer shows the phase.
    await page.getByTestId('queries-tab').click();
    await page.getByTestId('query-select-button').click();
    await page.getByRole('option', { name: /^status/ }).click();
    await page.getByRole('button', { name: 'Run Query' }).click();
    await waitForText(page, `"sessionId": "${pausedId}"`);
    await waitForText(page, '"phase": "paused"');
    await page.screenshot({ path: path.join(screenshots, 'query-status.png') });

    // More Actions → Send an Update: `resume`, with an idempotency key as its input.
    await page.getByRole('button', { name: 'More Actions' }).first().click();
    await page.getByRole('menuitem', { name: 'Send an Update' }).first().click();
    const dialog = page.getByRole('dialog').filter({ hasText: 'Send an Update' });
    await dialog.getByTestId('update-select-button').click();
    await dialog.getByRole('option', { name: /^resume\b/ }).click();
    await dialog.getByRole('textbox', { name: 'Data' }).click();
    await page.keyboard.type(`{"idempotencyKey": "web-ui-${suffix}"}`);
    await page.screenshot({ path: path.join(screenshots, 'update-resume.png') });
    await dialog.getByTestId('confirm-modal-button').click();
    await waitForText(page, 'Update successful');

    // The client sees what the UI did: the session runs again, restored from the pause's checkpoint.
    const status = await runningStatus(sys.sessions.get(pausedId));
    expect(status.lastRestore?.checkpointId).toBe(status.head?.checkpointId);
    expect((await sys.sessions.get(runningId).status()).phase).toBe('running');
    passed = true;
  });
});

/**
 * Waits until the page shows `text`, in its own document or in a frame: the UI renders a workflow's summary and
 * details (markdown) in sandboxed iframes, and answers as they come, with no marker to await.
 */
async function waitForText(page: Page, text: string): Promise<void> {
  try {
    await eventually(async () => {
      for (const frame of page.frames()) {
        const shown = await frame
          .locator('body')
          .innerText({ timeout: 1_000 })
          .catch(() => '');
        if (shown.includes(text)) return true;
      }
    }, STEP_MS);
  } catch (err) {
    await page.screenshot({ path: path.join(screenshots, 'failure.png') }).catch(() => undefined);
    throw new Error(`the page at ${page.url()} did not show ${JSON.stringify(text)}`, { cause: err });
  }
}
