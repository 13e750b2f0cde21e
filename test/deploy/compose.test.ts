/**
 * The deployment files (docker-compose.yml, Dockerfile, .dockerignore) checked without a Docker engine:
 * they must agree with the worker's configuration schema, its search attributes and its build output.
 * When the compose plugin is installed, `docker compose config` validates the file as well.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import YAML from 'yaml';
import { SEARCH_ATTRIBUTES } from '../../src/api/search-attributes';
import { EnvConfig, loadConfig } from '../../src/config';

const root = path.resolve(__dirname, '../..');
const read = (file: string) => fs.readFileSync(path.join(root, file), 'utf8');

interface Service {
  image?: string;
  build?: unknown;
  environment?: Record<string, unknown> | string[];
  ports?: (string | number | { target: number; published?: string | number })[];
  volumes?: (string | { type?: string; source?: string; target: string })[];
  depends_on?: string[] | Record<string, { condition?: string }>;
  healthcheck?: { test?: string | string[]; disable?: boolean };
  entrypoint?: string | string[];
  command?: string | string[];
}

const compose = YAML.parse(read('docker-compose.yml')) as { services: Record<string, Service>; volumes?: object };
const services = compose.services;
const service = (name: string): Service => {
  const s = services[name];
  if (!s) throw new Error(`docker-compose.yml has no service "${name}"`);
  return s;
};

/** A service's environment as compose hands it to the container: every value a string. */
function environment(s: Service): Record<string, string> {
  if (Array.isArray(s.environment)) {
    return Object.fromEntries(
      s.environment.map((entry) => {
        const i = entry.indexOf('=');
        return i < 0 ? [entry, ''] : [entry.slice(0, i), entry.slice(i + 1)];
      }),
    );
  }
  return Object.fromEntries(Object.entries(s.environment ?? {}).map(([k, v]) => [k, v == null ? '' : String(v)]));
}

/** Published ports as { host, container } (short syntax `[ip:]host:container[/proto]` or long syntax). */
function publishedPorts(s: Service): { host: number; container: number }[] {
  return (s.ports ?? []).map((p) => {
    if (typeof p === 'object') return { host: Number(p.published ?? p.target), container: Number(p.target) };
    const parts = String(p)
      .replace(/\/(tcp|udp)$/, '')
      .split(':');
    const container = Number(parts[parts.length - 1]);
    return { host: parts.length > 1 ? Number(parts[parts.length - 2]) : container, container };
  });
}

function mounts(s: Service): { source?: string; target: string }[] {
  return (s.volumes ?? []).map((v) => {
    if (typeof v === 'object') return { source: v.source, target: v.target };
    const [source, target] = v.split(':');
    return target === undefined ? { target: source! } : { source, target };
  });
}

function dependencies(s: Service): Record<string, string> {
  if (Array.isArray(s.depends_on)) return Object.fromEntries(s.depends_on.map((d) => [d, 'service_started']));
  return Object.fromEntries(Object.entries(s.depends_on ?? {}).map(([d, v]) => [d, v?.condition ?? 'service_started']));
}

const hostPort = (address: string) => {
  const [host, port] = address.split(':');
  return { host: host!, port: Number(port) };
};

/** The instructions of the Dockerfile's last stage, continuation lines joined, comments dropped. */
function finalStage(dockerfile: string): { keyword: string; args: string }[] {
  const instructions = dockerfile
    .replace(/\\\r?\n/g, ' ')
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const [, keyword, args] = /^(\S+)\s*(.*)$/.exec(line)!;
      return { keyword: keyword!.toUpperCase(), args: args! };
    });
  const from = instructions.map((i) => i.keyword).lastIndexOf('FROM');
  return instructions.slice(from);
}

const worker = service('worker');
const workerEnv = environment(worker);
const temporal = service('temporal');
const setup = service('temporal-setup');

describe('docker-compose.yml', () => {
  test('defines the database, server, setup, UI and worker services', () => {
    expect(Object.keys(services)).toEqual(
      expect.arrayContaining(['postgresql', 'temporal', 'temporal-setup', 'temporal-ui', 'worker', 'gateway']),
    );
    expect(service('postgresql').image).toMatch(/^postgres:16\b/);
    expect(temporal.image).toMatch(/^temporalio\/auto-setup:/);
    expect(setup.image).toMatch(/^temporalio\/admin-tools:/);
    expect(service('temporal-ui').image).toMatch(/^temporalio\/ui:/);
    expect(worker.build).toBeDefined();
  });

  test('every image is pinned to an explicit tag', () => {
    for (const [name, s] of Object.entries(services)) {
      if (s.image === undefined) {
        expect({ name, build: s.build }).toEqual({ name, build: expect.anything() });
        continue;
      }
      expect(s.image).not.toContain('${');
      if (/@sha256:[0-9a-f]{64}$/.test(s.image)) continue;
      const tag = /^[^@]+?:([^/:@]+)$/.exec(s.image)?.[1];
      expect({ name, tag }).toEqual({ name, tag: expect.stringMatching(/^[\w][\w.-]*$/) });
      expect({ name, tag }).not.toEqual({ name, tag: 'latest' });
    }
  });

  test('the server and the UI publish their ports, and no two services claim the same host port', () => {
    expect(publishedPorts(temporal)).toContainEqual({ host: 7233, container: 7233 });
    expect(publishedPorts(service('temporal-ui'))).toContainEqual({ host: 8080, container: 8080 });
    const hostPorts = Object.values(services).flatMap((s) => publishedPorts(s).map((p) => p.host));
    expect(new Set(hostPorts).size).toBe(hostPorts.length);
  });

  test("the worker's environment uses only variables of the configuration schema, with valid values", () => {
    const known = Object.keys(EnvConfig.shape);
    for (const key of Object.keys(workerEnv)) expect(known).toContain(key);

    const config = loadConfig(workerEnv);
    expect(config.temporal.address).toBe('temporal:7233');
    expect(config.temporal.namespace).toBe(environment(temporal).DEFAULT_NAMESPACE);
    expect(config.temporal.tls).toBeUndefined();
    expect(config.workerId).toBe(workerEnv.DS_WORKER_ID);
    expect(config.snapshotDir).toBe(workerEnv.DS_SNAPSHOT_DIR);
    // Encryption stays on, and the key is demanded from the operator's environment rather than baked in.
    expect(config.snapshots.encryption).toBe('aes-256-gcm');
    expect(workerEnv.DS_MASTER_KEYS).toMatch(/^\$\{DS_MASTER_KEYS:\?.+\}$/);
  });

  test('the gateway runs the compiled gateway with keys from a secret, no store and no master key', () => {
    const gateway = service('gateway');
    const env = environment(gateway);
    const known = Object.keys(EnvConfig.shape);
    for (const key of Object.keys(env)) expect(known).toContain(key);
    expect(gateway.command).toEqual(['node', 'dist/gateway/main.js']);
    const config = loadConfig(env);
    expect(config.temporal.address).toBe(workerEnv.TEMPORAL_ADDRESS);
    expect(config.taskQueue).toBe(loadConfig(workerEnv).taskQueue);
    expect(config.gateway).toMatchObject({ host: '0.0.0.0', keysFile: '/run/secrets/api-keys' });
    expect(publishedPorts(gateway)).toEqual([{ host: 7280, container: config.gateway.port }]);
    const secrets = (compose as { secrets?: Record<string, { file?: string }> }).secrets ?? {};
    expect((gateway as { secrets?: string[] }).secrets).toEqual(['api-keys']);
    expect(secrets['api-keys']?.file).toBeDefined();
    expect(env.DS_PAYLOAD_KEYS).toBe(workerEnv.DS_PAYLOAD_KEYS);
    // Workers read old timeline pages for it: no master key, no store.
    expect(Object.keys(env).filter((k) => /MASTER_KEY|SNAPSHOT/.test(k))).toEqual([]);
    expect(gateway.volumes ?? []).toEqual([]);
    expect(fs.existsSync(path.join(root, 'src', 'gateway', 'main.ts'))).toBe(true);
  });

  test('every Temporal client points at the temporal service on the port it listens on', () => {
    const frontend = hostPort(workerEnv.TEMPORAL_ADDRESS!);
    expect(frontend.host).toBe('temporal');
    expect(publishedPorts(temporal).map((p) => p.container)).toContain(frontend.port);
    expect(environment(temporal).TEMPORAL_ADDRESS).toBe(workerEnv.TEMPORAL_ADDRESS);
    expect(environment(service('temporal-ui')).TEMPORAL_ADDRESS).toBe(workerEnv.TEMPORAL_ADDRESS);
    const healthcheck = [temporal.healthcheck?.test ?? []].flat().join(' ');
    expect(healthcheck).toContain(`--address ${workerEnv.TEMPORAL_ADDRESS}`);
  });

  test('the snapshot store is a named volume mounted at DS_SNAPSHOT_DIR', () => {
    const mount = mounts(worker).find((m) => m.target === workerEnv.DS_SNAPSHOT_DIR);
    expect(mount).toBeDefined();
    expect(Object.keys(compose.volumes ?? {})).toContain(mount!.source);
    expect(path.posix.relative(workerEnv.DS_DATA_DIR!, workerEnv.DS_SNAPSHOT_DIR!)).not.toMatch(/^\.\./);
  });

  test('the setup service registers every search attribute, with its type, before the worker starts', () => {
    const script = [setup.entrypoint ?? [], setup.command ?? []]
      .flat()
      .join(' ')
      .replace(/\\\r?\n/g, ' ');
    const create = /temporal operator search-attribute create\s([^\n;|&)]*)/.exec(script)?.[1] ?? '';
    const pairs = Object.fromEntries([...create.matchAll(/--name\s+(\S+)\s+--type\s+(\S+)/g)].map((m) => [m[1], m[2]]));
    expect(pairs).toEqual(SEARCH_ATTRIBUTES);
    expect(create).toContain(`--address ${workerEnv.TEMPORAL_ADDRESS}`);
    expect(create).toContain(`--namespace ${workerEnv.TEMPORAL_NAMESPACE}`);
    expect(script).toMatch(/already exists/);

    expect(dependencies(setup)).toMatchObject({ temporal: 'service_healthy' });
    expect(dependencies(worker)).toMatchObject({ 'temporal-setup': 'service_completed_successfully' });
  });

  test("the README's production paragraph names everything compose refuses to start without", () => {
    const text = read('docker-compose.yml');
    const required = [...text.matchAll(/\$\{(\w+):\?/g)].map((m) => m[1]!);
    const files = [...text.matchAll(/file: \$\{\w+:-([^}]+)\}/g)].map((m) => m[1]!);
    expect(required).toEqual(expect.arrayContaining(['DS_MASTER_KEYS', 'DS_PAYLOAD_KEYS']));
    expect(files).toContain('./gateway-keys.json');
    const readme = read('README.md');
    const production = readme.slice(
      readme.indexOf('**Production**'),
      readme.indexOf('\n## ', readme.indexOf('**Production**')),
    );
    for (const name of [...new Set(required), ...files])
      expect({ name, named: production.includes(name) }).toEqual({ name, named: true });
  });

  test('dependencies name defined services, and health conditions have a health check to wait for', () => {
    const conditions = ['service_started', 'service_healthy', 'service_completed_successfully'];
    for (const [name, s] of Object.entries(services)) {
      for (const [dependency, condition] of Object.entries(dependencies(s))) {
        expect({ name, dependency, defined: dependency in services }).toEqual({ name, dependency, defined: true });
        expect(conditions).toContain(condition);
        if (condition === 'service_healthy') {
          expect({ dependency, healthcheck: services[dependency]!.healthcheck?.test }).toEqual({
            dependency,
            healthcheck: expect.anything(),
          });
        }
      }
    }
  });
});

describe('Dockerfile', () => {
  const dockerfile = read('Dockerfile');
  const runtime = finalStage(dockerfile);
  const last = (keyword: string) => runtime.filter((i) => i.keyword === keyword).pop()?.args;

  test('installs from the lockfile, builds, and drops development dependencies', () => {
    expect(dockerfile).toMatch(/^COPY .*package-lock\.json/m);
    expect(dockerfile).toMatch(/^RUN npm ci\s*$/m);
    expect(dockerfile).toMatch(/npm run build/);
    expect(dockerfile).toMatch(/npm prune --omit=dev/);
    for (const from of dockerfile.match(/^FROM \S+/gm) ?? []) expect(from).toMatch(/^FROM [^:\s]+:[\w][\w.-]*$/);
  });

  test('the final stage runs dist/worker.js as an unprivileged user', () => {
    expect(JSON.parse(last('CMD')!)).toEqual(['node', 'dist/worker.js']);
    expect(last('USER')).toBeDefined();
    expect(last('USER')).not.toMatch(/^(root|0)(:|$)/);
  });

  test("the image creates the compose file's snapshot directory, so a fresh volume there is the user's", () => {
    expect(runtime.some((i) => i.keyword === 'RUN' && i.args.includes(workerEnv.DS_SNAPSHOT_DIR!))).toBe(true);
    expect(runtime.some((i) => i.keyword === 'RUN' && /chown\b.*\/var\/lib\/durable-sessions/.test(i.args))).toBe(true);
  });

  test('its environment defaults are variables of the configuration schema', () => {
    const known = Object.keys(EnvConfig.shape);
    const env = runtime.filter((i) => i.keyword === 'ENV').flatMap((i) => [...i.args.matchAll(/(\w+)=/g)]);
    for (const [, key] of env) if (/^(DS|TEMPORAL)_/.test(key!)) expect(known).toContain(key);
  });

  test('tsconfig.build.json compiles src/worker.ts to dist/worker.js', () => {
    const file = path.join(root, 'tsconfig.build.json');
    const { config, error } = ts.readConfigFile(file, ts.sys.readFile);
    expect(error).toBeUndefined();
    const parsed = ts.parseJsonConfigFileContent(config, ts.sys, root, undefined, file);
    expect(parsed.errors).toEqual([]);
    const { rootDir, outDir } = parsed.options;
    expect(rootDir && path.resolve(rootDir)).toBe(path.join(root, 'src'));
    const source = path.join(root, 'src', 'worker.ts');
    const output = path.join(path.resolve(outDir!), path.relative(rootDir!, source)).replace(/\.ts$/, '.js');
    expect(output).toBe(path.join(root, 'dist', 'worker.js'));
    expect(parsed.options.module).toBe(ts.ModuleKind.CommonJS);
    if (fs.existsSync(source)) expect(parsed.fileNames.map((f) => path.resolve(f))).toContain(source);
  });

  test('.dockerignore keeps host-built output and local state out of the build context', () => {
    const ignored = read('.dockerignore')
      .split(/\r?\n/)
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    expect(ignored).toEqual(expect.arrayContaining(['node_modules', 'dist', 'data', '.tools', '.git']));
  });
});

const hasCompose = spawnSync('docker', ['compose', 'version'], { stdio: 'ignore' }).status === 0;

// Needs only the compose plugin, not a Docker engine.
(hasCompose ? test : test.skip)('docker compose validates docker-compose.yml', () => {
  const result = spawnSync('docker', ['compose', '-f', 'docker-compose.yml', 'config', '--quiet'], {
    cwd: root,
    encoding: 'utf8',
  });
  expect({ status: result.status, stderr: result.stderr }).toEqual({ status: 0, stderr: '' });
});
