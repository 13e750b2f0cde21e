import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import type { TLSSocket } from 'node:tls';
import { ConfigError, loadConfig, type Config } from '../../src/config';
import { runGateway } from '../../src/gateway/run';
import { GatewayTlsError, type RunningGateway } from '../../src/gateway/server';
import { eventually } from '../helpers/temporal';

/**
 * The gateway as `npm run gateway` runs it — configuration from the environment, on the run's Temporal dev server —
 * with DS_GATEWAY_TLS_CERT and DS_GATEWAY_TLS_KEY: HTTPS with a certificate made by openssl for this run.
 */
let dir: string;

/** A self-signed certificate for 127.0.0.1 and localhost, and its key, as PEM files under `dir`. */
function makeCertificate(name: string): { cert: string; key: string; fingerprint: string } {
  const cert = path.join(dir, `${name}.crt`);
  const key = path.join(dir, `${name}.key`);
  execFileSync(
    'openssl',
    [
      ...['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1'],
      ...['-subj', `/CN=${name}`, '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost'],
      ...['-keyout', key, '-out', cert],
    ],
    { stdio: 'ignore' },
  );
  return { cert, key, fingerprint: new crypto.X509Certificate(fs.readFileSync(cert)).fingerprint256 };
}

function environment(files: { cert?: string; key?: string }): NodeJS.ProcessEnv {
  return {
    TEMPORAL_ADDRESS: process.env.DS_TEST_TEMPORAL_ADDRESS,
    DS_DATA_DIR: path.join(dir, 'data'),
    DS_SNAPSHOT_ENCRYPTION: 'none',
    DS_PAYLOAD_ENCRYPTION: 'none',
    DS_GATEWAY_TLS_CERT: files.cert,
    DS_GATEWAY_TLS_KEY: files.key,
  };
}

/** `runGateway` on a free port: the configuration has no port 0, a test needs one. */
function start(config: Config): Promise<RunningGateway> {
  return runGateway({ ...config, gateway: { ...config.gateway, port: 0 } }, config.temporal.address!, keysFile);
}

/** GET over HTTPS trusting `ca` (a PEM file), with the certificate the server showed. */
function get(url: string, ca?: string): Promise<{ status: number; body: unknown; fingerprint: string }> {
  return new Promise((resolve, reject) => {
    const req = https.get(url, { ca: ca && fs.readFileSync(ca), agent: false }, (res) => {
      const fingerprint = (res.socket as TLSSocket).getPeerCertificate().fingerprint256;
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text), fingerprint }));
    });
    req.on('error', reject);
  });
}

let keysFile: string;
let first: ReturnType<typeof makeCertificate>;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(process.env.DS_TEST_TMP ?? os.tmpdir(), 'gateway-tls-'));
  keysFile = path.join(dir, 'keys.json');
  fs.writeFileSync(keysFile, JSON.stringify({ keys: [] }));
  first = makeCertificate('first');
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('gateway TLS configuration', () => {
  test('a certificate and a key: absolute paths in the resolved configuration', () => {
    const config = loadConfig({ DS_GATEWAY_TLS_CERT: 'tls/gw.crt', DS_GATEWAY_TLS_KEY: 'tls/gw.key' });
    expect(config.gateway.tls).toEqual({ certFile: path.resolve('tls/gw.crt'), keyFile: path.resolve('tls/gw.key') });
    expect(loadConfig({}).gateway.tls).toBeUndefined();
  });

  test('one without the other is a ConfigError naming both variables', () => {
    const issues = (env: NodeJS.ProcessEnv) => {
      try {
        loadConfig(env);
      } catch (err) {
        if (err instanceof ConfigError) return err.issues.map((i) => [i.path.join('.'), i.message]);
        throw err;
      }
      throw new Error('expected a ConfigError');
    };
    expect(issues({ DS_GATEWAY_TLS_CERT: 'gw.crt' })).toEqual([
      ['DS_GATEWAY_TLS_KEY', 'required with DS_GATEWAY_TLS_CERT: set both or neither'],
    ]);
    expect(issues({ DS_GATEWAY_TLS_KEY: 'gw.key' })).toEqual([
      ['DS_GATEWAY_TLS_CERT', 'required with DS_GATEWAY_TLS_KEY: set both or neither'],
    ]);
    // Empty is unset, as for every variable.
    expect(() => loadConfig({ DS_GATEWAY_TLS_CERT: 'gw.crt', DS_GATEWAY_TLS_KEY: '' })).toThrow(
      'DS_GATEWAY_TLS_KEY: required with DS_GATEWAY_TLS_CERT: set both or neither',
    );
  });
});

describe('the gateway over HTTPS', () => {
  let gateway: RunningGateway;
  beforeAll(async () => {
    gateway = await start(loadConfig(environment(first)));
  }, 60_000);
  afterAll(() => gateway?.close());

  test('serves https:// to a client that trusts the certificate', async () => {
    expect(gateway.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(await get(`${gateway.url}/healthz`, first.cert)).toEqual({
      status: 200,
      body: { ok: true },
      fingerprint: first.fingerprint,
    });
    // Readiness asks the Temporal server: the whole gateway is behind TLS, not only the probes.
    expect(await get(`${gateway.url}/readyz`, first.cert)).toMatchObject({ status: 200, body: { ok: true } });
  });

  test('a client that does not trust it is refused, and so is plain HTTP', async () => {
    await expect(get(`${gateway.url}/healthz`)).rejects.toMatchObject({ code: 'DEPTH_ZERO_SELF_SIGNED_CERT' });
    const plain = new Promise((resolve, reject) => {
      const req = http.get(`${gateway.url.replace('https:', 'http:')}/healthz`, { agent: false }, resolve);
      req.on('error', reject);
    });
    await expect(plain).rejects.toMatchObject({ code: 'ECONNRESET' });
  });

  test('a renewed certificate is served without a restart', async () => {
    const renewed = makeCertificate('renewed');
    // Renewed the way certbot and mounted secrets do it: new files put in place of the old ones.
    fs.renameSync(renewed.key, first.key);
    fs.renameSync(renewed.cert, first.cert);
    const seen = await eventually(async () => {
      const res = await get(`${gateway.url}/healthz`, first.cert);
      return res.fingerprint === renewed.fingerprint && res;
    });
    expect(seen).toMatchObject({ status: 200, body: { ok: true } });
  });
});

describe('TLS files the gateway cannot use stop it at start', () => {
  test('a file that cannot be read is named, with the variable', async () => {
    const missing = path.join(dir, 'missing.crt');
    const config = loadConfig(environment({ cert: missing, key: first.key }));
    const started = start(config);
    await expect(started).rejects.toThrow(GatewayTlsError);
    await expect(started).rejects.toThrow(
      `cannot read the gateway's TLS certificate ${missing} (DS_GATEWAY_TLS_CERT): ENOENT: no such file or directory`,
    );
  });

  test('a key that does not belong to the certificate', async () => {
    const other = makeCertificate('other');
    const started = start(loadConfig(environment({ cert: other.cert, key: first.key })));
    await expect(started).rejects.toThrow(GatewayTlsError);
    await expect(started).rejects.toThrow(
      `the gateway's TLS certificate ${other.cert} and key ${first.key} are not a usable pair`,
    );
  });
});
