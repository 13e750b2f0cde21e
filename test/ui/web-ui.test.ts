import crypto, { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { sessionWorkflowId } from '../../src/api';
import { freePort, startDevServer, type DevServer } from '../../src/dev-server';
import type { RunningGateway } from '../../src/gateway';
import { PayloadEncryptionCodec } from '../../src/payloads';
import { Keyring } from '../../src/snapshots';
import { startTestGateway } from '../helpers/gateway';
import { eventually, runningStatus, startTestSystem, type TestSystem } from '../helpers/temporal';

/**
 * The Temporal Web UI as a console for sessions, driven in a real headless Chromium the way an operator would: with
 * payloads encrypted, a session's spec is ciphertext until the operator signs in at the gateway's codec server and
 * lets the UI send its cookie; then the UI shows the spec, summary, details and event summaries decoded, finds paused
 * sessions by their search attribute, runs the `timeline` query and sends `pause` and `resume` updates. Debian's
 * chromium (scripts/install-chromium.sh); playwright-core brings none.
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
let gateway: RunningGateway | undefined;
let adminKey: string;
let browser: Browser | undefined;
let page: Page;
let screenshots: string;
let passed = 0;

(haveChromium ? describe : describe.skip)('Temporal Web UI', () => {
  beforeAll(async () => {
    // The gateway's port is chosen first: the dev server's Web UI is told its codec endpoint when it starts, as by
    // `npm start`. Both on loopback: the UI and the gateway are the same site, so the sign-in cookie goes along.
    const gatewayPort = await freePort();
    const codecEndpoint = `http://127.0.0.1:${gatewayPort}/v1/codec`;
    // The run's shared dev server is headless: this one serves the Web UI, on loopback.
    server = await startDevServer({
      port: await freePort(),
      uiPort: await freePort(),
      extraArgs: ['--ui-codec-endpoint', codecEndpoint],
    });
    const uiUrl = server.uiUrl!;
    // The UI server comes up beside the frontend, not necessarily with it.
    await eventually(async () => (await fetch(uiUrl)).ok, STEP_MS);
    const codec = new PayloadEncryptionCodec(new Keyring([{ id: 'ui-1', key: randomBytes(32) }]));
    sys = await startTestSystem({ address: server.address, payloadCodec: codec });
    const started = await startTestGateway(sys, [{ id: 'admin' }], {
      port: gatewayPort,
      codec: { codec, corsOrigins: [uiUrl], namespace: 'default' },
    });
    gateway = started.gateway;
    adminKey = started.keys.admin!;
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
    await gateway?.close();
    await sys?.close();
    await server?.stop();
    if (passed === 2 && !process.env.DS_UI_SCREENSHOTS) fs.rmSync(screenshots, { recursive: true, force: true });
    else if (screenshots) console.log(`Web UI screenshots: ${screenshots}`);
  });

  const suffix = crypto.randomUUID().slice(0, 8);
  const workspaceId = `ui-workspace-${suffix}`;
  const workspaceWorkflow = sessionWorkflowId(workspaceId);
  const secret = `secret-${crypto.randomUUID()}`;
  const seed = `seed-${crypto.randomUUID()}`;

  test('without the codec server sign-in, a session’s spec is ciphertext', async () => {
    const session = await sys.sessions.start({
      sessionId: workspaceId,
      runtime: {
        kind: 'workspace',
        command: ['sh', '-c', 'while true; do sleep 0.2; done'],
        env: { DB_PASSWORD: secret },
        files: { 'seed.txt': seed },
      },
    });
    await runningStatus(session);

    await openSession(page, workspaceWorkflow);
    // The codec server refuses the UI (no credentials): the UI says so and shows the start input as it is stored,
    // the sealed bytes in base64.
    await waitForText(page, 'Codec Server could not connect');
    await eventually(async () => /\nInput\n"[A-Za-z0-9+/]{200,}={0,2}"\n/.test(await allText(page)), STEP_MS);
    await page.screenshot({ path: path.join(screenshots, 'ciphertext.png') });
    const shown = await allText(page);
    expect(shown).not.toContain(secret);
    expect(shown).not.toContain(seed);
    expect(shown).not.toContain('DB_PASSWORD');
    passed++;
  });

  test('signed in: decoded spec, details, event summaries; lists paused sessions, runs timeline, pause, resume', async () => {
    // Sign in at the gateway's codec server, in the same browser.
    await page.goto(`${gateway!.url}/v1/codec/login`);
    await page.getByLabel(/Admin API key/).fill(adminKey);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText(/^Signed in as admin/).waitFor();

    // The Web UI's Codec Server settings: the browser setting, the same endpoint, with cross-origin credentials.
    await page.goto('/namespaces/default/workflows');
    await page.getByTestId('data-encoder-status-configured').click();
    const settings = page.getByRole('dialog').filter({ hasText: 'Codec Server' });
    await settings.getByTestId('use-local-endpoint-input').check();
    await settings.locator('#data-encoder-endpoint-input').fill(`${gateway!.url}/v1/codec`);
    await settings.getByTestId('data-encoder-include-credentials').click();
    expect(await settings.locator('#pass-access-credentials').isChecked()).toBe(true);
    await page.screenshot({ path: path.join(screenshots, 'codec-settings.png') });
    await settings.getByRole('button', { name: 'Apply' }).click();

    // The session's page again: its start input decoded, the secret with it (Temporal shows the raw input).
    await openSession(page, workspaceWorkflow);
    await waitForText(page, secret);
    await waitForText(page, 'DB_PASSWORD');
    await page.screenshot({ path: path.join(screenshots, 'decoded-input.png') });
    // Every activity has a summary in the event history.
    await page.getByTestId('history-tab').click();
    await waitForText(page, 'start workspace runtime');
    await waitForText(page, 'choose a host to start');
    // Down to the events' rows, for the screenshot.
    await page.mouse.move(760, 500);
    await page.mouse.wheel(0, 650);
    await page.waitForTimeout(300);
    await page.screenshot({ path: path.join(screenshots, 'history.png') });

    // User Metadata: the static summary and details (env values left out), the current details.
    await page.getByTestId('user-metadata-tab').click();
    await waitForText(page, `workspace · ${workspaceId}`);
    await waitForText(page, 'env: DB_PASSWORD=•••');
    await waitForText(page, 'running · workspace runtime');
    await page.screenshot({ path: path.join(screenshots, 'session-metadata.png') });

    // More Actions → Send an Update: `pause`, with a reason.
    await sendUpdate(page, 'pause', `{"reason": "web ui ${suffix}"}`);
    expect((await sys.sessions.get(workspaceId).status()).phase).toBe('paused');

    // The Queries tab runs `timeline`: the session's entries as JSON, the pause's checkpoint with its reason.
    await page.getByTestId('queries-tab').click();
    await page.getByTestId('query-select-button').click();
    await page.getByRole('option', { name: /^timeline/ }).click();
    await page.getByRole('button', { name: 'Run Query' }).click();
    await waitForText(page, '"trigger": "pause"');
    await waitForText(page, `"reason": "web ui ${suffix}"`);
    // The update's notice goes by itself; the screenshot is of the answer.
    await page.locator('#svelte').getByText('Update successful').waitFor({ state: 'hidden' });
    await page.screenshot({ path: path.join(screenshots, 'query-timeline.png') });

    // Paused sessions by their search attribute: this one, not a running one.
    const runningId = `ui-running-${suffix}`;
    const running = await sys.sessions.start({ sessionId: runningId, runtime: { kind: 'memory', initialState: 'b' } });
    await runningStatus(running);
    // Visibility follows the workflow's upsert: the UI's list is asked only once the server's answers.
    await eventually(async () => {
      for await (const w of sys.client.workflow.list({
        query: `SessionState="paused" AND WorkflowId="${workspaceWorkflow}"`,
      }))
        return w;
    });
    const runningWorkflow = sessionWorkflowId(runningId);
    await page.goto(`/namespaces/default/workflows?query=${encodeURIComponent('SessionState="paused"')}`);
    await page.getByRole('link', { name: workspaceWorkflow, exact: true }).waitFor();
    // The rows come in one answer: with the paused one shown, a missing running one is really left out.
    expect(await page.getByRole('link', { name: runningWorkflow, exact: true }).count()).toBe(0);
    await page.screenshot({ path: path.join(screenshots, 'list-paused.png') });
    // The same list, asked for running sessions, has the other one: the filter is what leaves it out above.
    await page.goto(`/namespaces/default/workflows?query=${encodeURIComponent('SessionState="running"')}`);
    await page.getByRole('link', { name: runningWorkflow, exact: true }).waitFor();
    expect(await page.getByRole('link', { name: workspaceWorkflow, exact: true }).count()).toBe(0);

    // The paused session's page: why it is paused; then `resume`, with an idempotency key as its input.
    await openSession(page, workspaceWorkflow);
    await page.getByTestId('user-metadata-tab').click();
    await waitForText(page, 'paused · workspace runtime');
    await waitForText(page, `why: paused: web ui ${suffix}`);
    await page.screenshot({ path: path.join(screenshots, 'session-metadata-paused.png') });
    await sendUpdate(page, 'resume', `{"idempotencyKey": "web-ui-${suffix}"}`);

    // The client sees what the UI did: the session runs again, restored from the pause's checkpoint.
    const status = await runningStatus(sys.sessions.get(workspaceId));
    expect(status.lastRestore?.checkpointId).toBe(status.head?.checkpointId);
    expect((await sys.sessions.get(runningId).status()).phase).toBe('running');
    passed++;
  });
});

/** Opens a workflow's page from the list, found by its id. */
async function openSession(page: Page, workflowId: string): Promise<void> {
  await page.goto(`/namespaces/default/workflows?query=${encodeURIComponent(`WorkflowId="${workflowId}"`)}`);
  await page.getByRole('link', { name: workflowId, exact: true }).click();
}

/** More Actions → Send an Update: `name` with `data` (JSON) typed in, confirmed and answered. */
async function sendUpdate(page: Page, name: string, data: string): Promise<void> {
  await page.getByRole('button', { name: 'More Actions' }).first().click();
  await page.getByRole('menuitem', { name: 'Send an Update' }).first().click();
  const dialog = page.getByRole('dialog').filter({ hasText: 'Send an Update' });
  await dialog.getByTestId('update-select-button').click();
  await dialog.getByRole('option', { name: new RegExp(`^${name}\\b`) }).click();
  await dialog.getByRole('textbox', { name: 'Data' }).click();
  await page.keyboard.type(data);
  await page.screenshot({ path: path.join(screenshots, `update-${name}.png`) });
  await dialog.getByTestId('confirm-modal-button').click();
  await waitForText(page, 'Update successful');
}

/** The text the page shows, in its own document and in its frames. */
async function allText(page: Page): Promise<string> {
  const texts = await Promise.all(
    page.frames().map((frame) =>
      frame
        .locator('body')
        .innerText({ timeout: 1_000 })
        .catch(() => ''),
    ),
  );
  return texts.join('\n');
}

/**
 * Waits until the page shows `text`, in its own document or in a frame: the UI renders a workflow's summary and
 * details (markdown) in sandboxed iframes, and answers as they come, with no marker to await.
 */
async function waitForText(page: Page, text: string): Promise<void> {
  try {
    await eventually(async () => ((await allText(page)).includes(text) ? true : undefined), STEP_MS);
  } catch (err) {
    await page.screenshot({ path: path.join(screenshots, 'failure.png') }).catch(() => undefined);
    throw new Error(`the page at ${page.url()} did not show ${JSON.stringify(text)}`, { cause: err });
  }
}
