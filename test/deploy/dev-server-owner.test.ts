import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../../src/dev-server';
import { alive } from '../helpers/processes';
import { eventually } from '../helpers/temporal';

/**
 * The embedded dev server belongs to the process that started it (`npm start`, a test run). An owner killed outright
 * (kill -9, the OOM killer) runs no exit handler, yet must not leave the server behind holding its port and database:
 * the next `npm start` on the same data directory would find them taken.
 */
const root = path.resolve(__dirname, '..', '..');
const OWNER = `
const { startDevServer } = require('./src/dev-server');
startDevServer({ port: Number(process.env.PORT), uiPort: null, dbFilename: process.env.DB }).then((server) => {
  process.stdout.write(server.process.pid + '\\n');
  setInterval(() => undefined, 60_000);
});
`;

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

(process.platform === 'linux' ? test : test.skip)(
  'an owner killed with SIGKILL takes its dev server with it: no process, no port held',
  async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds-dev-owner-'));
    const port = await freePort();
    const owner = spawn(process.execPath, ['--import', 'tsx', '-e', OWNER], {
      cwd: root,
      env: { ...process.env, PORT: String(port), DB: path.join(dir, 'temporal.db') },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let serverPid = 0;
    try {
      let out = '';
      owner.stdout.on('data', (d: Buffer) => (out += d.toString()));
      await eventually(() => /^\d+\n/.test(out), 90_000);
      serverPid = Number(out.trim());
      expect(alive(serverPid)).toBe(true);
      expect(await listening(port)).toBe(true);

      owner.kill('SIGKILL');
      await eventually(() => !alive(serverPid), 15_000);
      await eventually(async () => !(await listening(port)), 15_000);
    } finally {
      owner.kill('SIGKILL');
      if (serverPid && alive(serverPid)) process.kill(serverPid, 'SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    }
  },
  120_000,
);
