import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CreateBucketCommand, HeadBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { freePort } from '../../src/dev-server';

/** The S3 server scripts/install-s3-server.sh builds. */
export const VERSITYGW_BIN = path.resolve(__dirname, '..', '..', '.tools', 's3', 'bin', 'versitygw');

/** A real S3 server (versitygw on a directory of its own) on a loopback port, with one bucket made. */
export interface S3TestServer {
  endpoint: string;
  region: string;
  credentials: { accessKeyId: string; secretAccessKey: string };
  bucket: string;
  /** Where the server keeps the bucket's objects, as files (`<dir>/<bucket>/<key>`). */
  dir: string;
  /** The port it listens on (a proxy in front of it forwards here). */
  port: number;
  /** A plain client of the server, with the SDK's defaults, for what the tests check behind the backend's back. */
  client(): S3Client;
  /** kill -9 of the server (its objects stay on disk); resolves once it is gone. */
  kill(): Promise<void>;
  /** Starts the server again, killed or not, on the same port and directory; resolves once it answers. */
  restart(): Promise<void>;
  /** Stops the server and removes its directory; safe to call twice. */
  stop(): Promise<void>;
}

/**
 * Starts versitygw's posix backend on a fresh temporary directory and a free port with root credentials of its own,
 * waits until it answers, and makes a bucket. The server dies with the process that started it, even by kill -9: it
 * runs under a small shell that holds the read end of a pipe from this process and kills it when the pipe closes.
 */
export async function startS3Server(options: { bucket?: string } = {}): Promise<S3TestServer> {
  if (!fs.existsSync(VERSITYGW_BIN)) {
    throw new Error(`${VERSITYGW_BIN} is missing: run scripts/install-s3-server.sh (npm test runs it)`);
  }
  const dir = fs.mkdtempSync(path.join(process.env.DS_TEST_TMP ?? os.tmpdir(), 's3-'));
  const data = path.join(dir, 'data');
  fs.mkdirSync(data);
  const port = await freePort();
  const credentials = { accessKeyId: 'ds-test-root', secretAccessKey: randomBytes(18).toString('base64url') };
  const region = 'us-east-1';
  const bucket = options.bucket ?? 'ds-test';
  // --keep-alive: versitygw closes every connection after one response unless told otherwise, which no S3 service
  // does; a restore's ranged reads would each pay a new connection (bench/README.md, S3).
  const args = ['--port', `127.0.0.1:${port}`, '--region', region, '--keep-alive', '--quiet', 'posix', data];
  const lifeline =
    'trap "" PIPE; "$0" "$@" </dev/null & server=$!; read -r _; kill -9 $server 2>/dev/null; wait $server';
  const logFile = path.join(dir, 'versitygw.log');
  const launch = () => {
    const log = fs.openSync(logFile, 'a');
    const child = spawn('bash', ['-c', lifeline, VERSITYGW_BIN, ...args], {
      stdio: ['pipe', log, log],
      env: {
        ...process.env,
        ROOT_ACCESS_KEY_ID: credentials.accessKeyId,
        ROOT_SECRET_ACCESS_KEY: credentials.secretAccessKey,
      },
    });
    fs.closeSync(log);
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    return { child, exited };
  };
  let current = launch();
  // Closing the lifeline is a kill -9 of the server.
  const kill = async () => {
    current.child.stdin?.end();
    await current.exited;
  };
  let stopped = false;
  const stop = async () => {
    if (!stopped) {
      stopped = true;
      await kill();
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const endpoint = `http://127.0.0.1:${port}`;
  const client = () => new S3Client({ endpoint, region, credentials, forcePathStyle: true });
  /** Waits until the server answers `request`, at most a minute. */
  const answers = async (request: (admin: S3Client) => Promise<unknown>) => {
    const admin = client();
    try {
      const deadline = Date.now() + 60_000;
      for (;;) {
        if (current.child.exitCode !== null) throw new Error('versitygw exited');
        try {
          await request(admin);
          return;
        } catch (err) {
          if (Date.now() > deadline) throw err;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    } finally {
      admin.destroy();
    }
  };
  try {
    await answers((admin) => admin.send(new CreateBucketCommand({ Bucket: bucket })));
  } catch (err) {
    const output = fs.readFileSync(logFile, 'utf8').slice(-2000);
    await stop();
    throw new Error(`versitygw did not start on ${endpoint}: ${String(err)}\n${output}`, { cause: err });
  }
  const restart = async () => {
    await kill();
    current = launch();
    await answers((admin) => admin.send(new HeadBucketCommand({ Bucket: bucket })));
  };
  return { endpoint, region, credentials, bucket, dir: data, port, client, kill, restart, stop };
}

/**
 * What a worker's environment says to keep its snapshot store under `prefix` in the server's bucket: the settings a
 * deployment sets, credentials through the standard AWS chain (its environment variables).
 */
export function s3StoreEnv(server: S3TestServer, prefix: string): NodeJS.ProcessEnv {
  return {
    DS_SNAPSHOT_STORE: `s3://${server.bucket}/${prefix}`,
    DS_S3_ENDPOINT: server.endpoint,
    DS_S3_REGION: server.region,
    DS_S3_FORCE_PATH_STYLE: 'true',
    AWS_ACCESS_KEY_ID: server.credentials.accessKeyId,
    AWS_SECRET_ACCESS_KEY: server.credentials.secretAccessKey,
    // Nothing to ask an instance metadata service on a test machine.
    AWS_EC2_METADATA_DISABLED: 'true',
  };
}
