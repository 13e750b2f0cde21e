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
import { SERVER_DYNAMIC_CONFIG } from '../../src/dev-server';

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

// Merge keys (`<<: *worker`) as compose reads them.
const compose = YAML.parse(read('docker-compose.yml'), { merge: true }) as {
  services: Record<string, Service>;
  volumes?: object;
};
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

/**
 * Values for what compose demands from the environment of `docker compose up` (`${VAR:?message}`), shaped as an
 * operator would give them, so that the services' environments can be checked as the containers receive them.
 */
const OPERATOR_ENV: Record<string, string> = {
  DS_MASTER_KEYS: `prod-1:${Buffer.alloc(32, 1).toString('base64')}`,
  DS_PAYLOAD_KEYS: `payload-1:${Buffer.alloc(32, 2).toString('base64')}`,
  AWS_ACCESS_KEY_ID: 'ds-compose-test',
  AWS_SECRET_ACCESS_KEY: 'ds-compose-test-secret',
};

/**
 * Compose's interpolation of one value: `${VAR:?message}` from OPERATOR_ENV (the test fails on one it does not know),
 * `${VAR:-default}` to its default (the operator's environment is otherwise empty here), `$$` to `$`.
 */
function interpolate(value: string): string {
  return value.replace(/\$\$|\$\{(\w+)(?::([?-])([^}]*))?\}/g, (whole, name?: string, op?: string, arg?: string) => {
    if (whole === '$$') return '$';
    if (op === '-') return arg!;
    const given = OPERATOR_ENV[name!];
    if (given === undefined) throw new Error(`docker-compose.yml needs ${name}, which this test does not supply`);
    return given;
  });
}

/** Variables the project's image reads that are not the configuration schema's, and who reads them. */
const OUTSIDE_SCHEMA: Record<string, string> = {
  // The S3 backend's credentials come from the AWS SDK's standard chain, which reads these itself.
  AWS_ACCESS_KEY_ID: 'AWS SDK credential chain',
  AWS_SECRET_ACCESS_KEY: 'AWS SDK credential chain',
  AWS_SESSION_TOKEN: 'AWS SDK credential chain',
  // glibc's allocator (see the comment in docker-compose.yml).
  MALLOC_ARENA_MAX: 'glibc',
};

const temporal = service('temporal');
const setup = service('temporal-setup');
const s3 = service('s3');
const bucketJob = service('s3-bucket');
const gateway = service('gateway');
const WORKERS = ['worker-1', 'worker-2'];
const workerEnvs = WORKERS.map((name) => environment(service(name)));
const workerEnv = workerEnvs[0]!;
/** The services that run the project's image: everything built from this repository's Dockerfile. */
const projectServices = Object.entries(services).filter(([, s]) => s.build !== undefined);

/** The server's global flags and backend from its command (`--flag value … posix <dir>`). */
function versitygwCommand(s: Service): { flags: Record<string, string>; backend: string[] } {
  const args = [s.command ?? []].flat();
  const flags: Record<string, string> = {};
  let i = 0;
  for (; i < args.length && args[i]!.startsWith('--'); i += 2) flags[args[i]!.slice(2)] = args[i + 1]!;
  return { flags, backend: args.slice(i) };
}

describe('docker-compose.yml', () => {
  test('defines the database, server, setup, UI, S3 server, bucket job, two workers and the gateway', () => {
    expect(Object.keys(services).sort()).toEqual(
      ['postgresql', 'temporal', 'temporal-setup', 'temporal-ui', 's3', 's3-bucket', ...WORKERS, 'gateway'].sort(),
    );
    expect(service('postgresql').image).toMatch(/^postgres:16\b/);
    expect(temporal.image).toMatch(/^temporalio\/auto-setup:/);
    expect(setup.image).toMatch(/^temporalio\/admin-tools:/);
    expect(service('temporal-ui').image).toMatch(/^temporalio\/ui:/);
    expect(projectServices.map(([name]) => name).sort()).toEqual([...WORKERS, 'gateway'].sort());
  });

  test('the S3 server is versitygw at the version the tests run against', () => {
    const version = /^VERSITYGW_VERSION="([^"]+)"/m.exec(read('scripts/install-s3-server.sh'))?.[1];
    expect(version).toMatch(/^v\d+\.\d+\.\d+$/);
    expect(s3.image).toBe(`versity/versitygw:${version}`);
    expect(bucketJob.image).toBe(s3.image);
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

  test("every service of the project's image uses only variables of the configuration schema, with valid values", () => {
    const known = Object.keys(EnvConfig.shape);
    for (const [name, s] of projectServices) {
      const env = environment(s);
      for (const key of Object.keys(env)) {
        expect({ name, key, known: known.includes(key) || key in OUTSIDE_SCHEMA }).toEqual({ name, key, known: true });
      }
      const config = loadConfig(Object.fromEntries(Object.entries(env).map(([k, v]) => [k, interpolate(v)])));
      expect(config.temporal.address).toBe('temporal:7233');
      expect(config.temporal.namespace).toBe(environment(temporal).DEFAULT_NAMESPACE);
      expect(config.temporal.tls).toBeUndefined();
      // The SDK's threads allocate through glibc too: its arenas keep freed memory (bench/README.md).
      expect({ name, MALLOC_ARENA_MAX: env.MALLOC_ARENA_MAX }).toEqual({ name, MALLOC_ARENA_MAX: '2' });
    }
  });

  test('the workers share one S3 store and differ in their ids', () => {
    const configs = workerEnvs.map((env) =>
      loadConfig(Object.fromEntries(Object.entries(env).map(([k, v]) => [k, interpolate(v)]))),
    );
    for (const config of configs) {
      expect(config.snapshotStore).toEqual({
        kind: 's3',
        bucket: expect.any(String),
        prefix: expect.any(String),
        endpoint: expect.any(String),
        region: expect.any(String),
        forcePathStyle: true,
      });
      expect(config.snapshotStore).toEqual(configs[0]!.snapshotStore);
      expect(config.taskQueue).toBe(configs[0]!.taskQueue);
      // Encryption stays on, and the keys are demanded from the operator's environment rather than baked in.
      expect(config.snapshots.encryption).toBe('aes-256-gcm');
    }
    expect(new Set(configs.map((c) => c.workerId)).size).toBe(WORKERS.length);
    expect(new Set(configs.map((c) => c.hostTaskQueue)).size).toBe(WORKERS.length);
    for (const env of workerEnvs) {
      expect(env.DS_WORKER_ID).toBeDefined();
      expect(env.DS_SNAPSHOT_DIR).toBeUndefined();
      expect(env.DS_MASTER_KEYS).toMatch(/^\$\{DS_MASTER_KEYS:\?.+\}$/);
      expect(env.AWS_ACCESS_KEY_ID).toMatch(/^\$\{AWS_ACCESS_KEY_ID:\?.+\}$/);
      expect(env.AWS_SECRET_ACCESS_KEY).toMatch(/^\$\{AWS_SECRET_ACCESS_KEY:\?.+\}$/);
      // Alike but for the id: the same store, keys, credentials and settings.
      expect({ ...env, DS_WORKER_ID: undefined }).toEqual({ ...workerEnv, DS_WORKER_ID: undefined });
    }
  });

  test('the S3 endpoint is the s3 service on the port it listens on, with its region and root credentials', () => {
    const config = loadConfig(Object.fromEntries(Object.entries(workerEnv).map(([k, v]) => [k, interpolate(v)])));
    if (config.snapshotStore.kind !== 's3') throw new Error('the workers do not use an S3 store');
    const endpoint = new URL(config.snapshotStore.endpoint!);
    expect(endpoint.hostname).toBe('s3');
    const { flags, backend } = versitygwCommand(s3);
    expect(Number(/:(\d+)$/.exec(flags.port ?? '')?.[1])).toBe(Number(endpoint.port));
    expect(backend[0]).toBe('posix');
    // Path-style addressing: the server is not given a virtual domain for bucket-in-host names.
    expect(flags['virtual-domain']).toBeUndefined();
    const env = environment(s3);
    // Connections stay open between requests, as on any S3 service (versitygw closes them otherwise).
    expect(env.VGW_KEEP_ALIVE).toBe('true');
    expect(env.VGW_REGION).toBe(config.snapshotStore.region);
    // The server's root user is the key pair the workers sign with, both from the operator's environment.
    expect(env.ROOT_ACCESS_KEY_ID).toBe(workerEnv.AWS_ACCESS_KEY_ID);
    expect(env.ROOT_SECRET_ACCESS_KEY).toBe(workerEnv.AWS_SECRET_ACCESS_KEY);
    // Its data outlives the container, on a named volume of its own.
    const data = mounts(s3).find((m) => m.target === backend[1]);
    expect(Object.keys(compose.volumes ?? {})).toContain(data?.source);
    const healthcheck = [s3.healthcheck?.test ?? []].flat().join(' ');
    expect(env.VGW_HEALTH).toMatch(/^\//);
    expect(healthcheck).toContain(`:${endpoint.port}${env.VGW_HEALTH}`);
  });

  test('the bucket job makes the workers’ bucket once the server is healthy, and the workers wait for it', () => {
    const config = loadConfig(Object.fromEntries(Object.entries(workerEnv).map(([k, v]) => [k, interpolate(v)])));
    if (config.snapshotStore.kind !== 's3') throw new Error('the workers do not use an S3 store');
    const script = [bucketJob.entrypoint ?? [], bucketJob.command ?? []]
      .flat()
      .join(' ')
      .replace(/\\\r?\n/g, ' ');
    expect(script).toMatch(/versitygw admin --endpoint-url (\S+) create-bucket/);
    expect(/--endpoint-url (\S+)/.exec(script)?.[1]).toBe(config.snapshotStore.endpoint);
    expect(/--bucket (\S+)/.exec(script)?.[1]).toBe(config.snapshotStore.bucket);
    // A second `up` finds the bucket there: that is success, not a failed job the workers would never start after.
    expect(script).toMatch(/BucketAlreadyOwnedByYou\*?\) exit 0/);
    const env = environment(bucketJob);
    expect(env.ADMIN_ACCESS_KEY_ID).toBe(workerEnv.AWS_ACCESS_KEY_ID);
    expect(env.ADMIN_SECRET_ACCESS_KEY).toBe(workerEnv.AWS_SECRET_ACCESS_KEY);
    expect(env.ADMIN_REGION ?? 'us-east-1').toBe(config.snapshotStore.region);
    expect(dependencies(bucketJob)).toMatchObject({ s3: 'service_healthy' });
    for (const name of WORKERS) {
      expect({ name, ...dependencies(service(name)) }).toMatchObject({
        name,
        's3-bucket': 'service_completed_successfully',
      });
    }
  });

  test('no volume is shared: each worker has a data volume of its own, and nothing mounts a snapshots volume', () => {
    const named = Object.keys(compose.volumes ?? {});
    expect(named).not.toContain('snapshots');
    const users = new Map<string, string[]>();
    for (const [name, s] of Object.entries(services)) {
      for (const m of mounts(s)) {
        expect({ name, target: m.target }).not.toEqual({ name, target: expect.stringMatching(/snapshots/) });
        if (m.source && named.includes(m.source)) users.set(m.source, [...(users.get(m.source) ?? []), name]);
      }
    }
    for (const [volume, by] of users) expect({ volume, by: by.length }).toEqual({ volume, by: 1 });
    for (const [i, name] of WORKERS.entries()) {
      const data = mounts(service(name)).find((m) => m.target === workerEnvs[i]!.DS_DATA_DIR);
      expect({ name, volume: data?.source && named.includes(data.source) }).toEqual({ name, volume: true });
    }
  });

  test('the server reads the dynamic config file the dev server follows, with the same values', () => {
    const temporal = service('temporal');
    const file = environment(temporal).DYNAMIC_CONFIG_FILE_PATH;
    expect(file).toBeDefined();
    const mount = mounts(temporal).find((m) => m.target === path.posix.join('/etc/temporal', file!));
    expect(mount?.source).toBe('./deploy/temporal-dynamic-config.yaml');
    const values = YAML.parse(read(mount!.source!)) as Record<string, { value: unknown }[]>;
    expect(Object.fromEntries(Object.entries(values).map(([key, [first]]) => [key, first?.value]))).toEqual(
      SERVER_DYNAMIC_CONFIG,
    );
  });

  test('the gateway runs the compiled gateway with keys from a secret, no store, no bucket and no master key', () => {
    const env = environment(gateway);
    expect(gateway.command).toEqual(['node', 'dist/gateway/main.js']);
    const config = loadConfig(Object.fromEntries(Object.entries(env).map(([k, v]) => [k, interpolate(v)])));
    expect(config.temporal.address).toBe(workerEnv.TEMPORAL_ADDRESS);
    expect(config.taskQueue).toBe(workerEnv.DS_TASK_QUEUE);
    expect(config.gateway).toMatchObject({ host: '0.0.0.0', keysFile: '/run/secrets/api-keys' });
    expect(publishedPorts(gateway)).toEqual([{ host: 7280, container: config.gateway.port }]);
    const secrets = (compose as { secrets?: Record<string, { file?: string }> }).secrets ?? {};
    expect((gateway as { secrets?: string[] }).secrets).toEqual(['api-keys']);
    expect(secrets['api-keys']?.file).toBeDefined();
    expect(env.DS_PAYLOAD_KEYS).toBe(workerEnv.DS_PAYLOAD_KEYS);
    // Workers read old timeline pages for it: no master key, no store, no bucket credential.
    expect(Object.keys(env).filter((k) => /MASTER_KEY|SNAPSHOT|S3|^AWS_/.test(k))).toEqual([]);
    expect(gateway.volumes ?? []).toEqual([]);
    expect(fs.existsSync(path.join(root, 'src', 'gateway', 'main.ts'))).toBe(true);
  });

  test('every Temporal client points at the temporal service on the port it listens on', () => {
    const frontend = hostPort(workerEnv.TEMPORAL_ADDRESS!);
    expect(frontend.host).toBe('temporal');
    expect(publishedPorts(temporal).map((p) => p.container)).toContain(frontend.port);
    expect(environment(temporal).TEMPORAL_ADDRESS).toBe(workerEnv.TEMPORAL_ADDRESS);
    expect(environment(service('temporal-ui')).TEMPORAL_ADDRESS).toBe(workerEnv.TEMPORAL_ADDRESS);
    for (const [name, s] of projectServices) {
      expect({ name, address: environment(s).TEMPORAL_ADDRESS }).toEqual({ name, address: workerEnv.TEMPORAL_ADDRESS });
    }
    const healthcheck = [temporal.healthcheck?.test ?? []].flat().join(' ');
    expect(healthcheck).toContain(`--address ${workerEnv.TEMPORAL_ADDRESS}`);
  });

  test('the setup service registers every search attribute, with its type, before the workers start', () => {
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
    for (const name of WORKERS) {
      expect({ name, ...dependencies(service(name)) }).toMatchObject({
        name,
        'temporal-setup': 'service_completed_successfully',
      });
    }
  });

  test("the README's production paragraph names everything compose refuses to start without", () => {
    const text = read('docker-compose.yml');
    const required = [...text.matchAll(/\$\{(\w+):\?/g)].map((m) => m[1]!);
    const files = [...text.matchAll(/file: \$\{\w+:-([^}]+)\}/g)].map((m) => m[1]!);
    expect(required).toEqual(
      expect.arrayContaining(['DS_MASTER_KEYS', 'DS_PAYLOAD_KEYS', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY']),
    );
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

  test("the image creates every worker's data directory, owned by its user, so a fresh volume there is the user's", () => {
    const user = last('USER')!;
    for (const env of workerEnvs) {
      const dir = env.DS_DATA_DIR!;
      expect(runtime.some((i) => i.keyword === 'RUN' && new RegExp(`mkdir\\b.*${dir}(/|\\s|$)`).test(i.args))).toBe(
        true,
      );
      const chown = runtime.find((i) => i.keyword === 'RUN' && new RegExp(`chown -R \\S+ ${dir}(\\s|$)`).test(i.args));
      const owner = /chown -R (\S+)/.exec(chown?.args ?? '')?.[1];
      // node:node is uid:gid 1000:1000 in the official image; the USER line names it by number.
      expect({ owner, user }).toEqual({ owner: expect.stringMatching(/^(node:node|1000:1000)$/), user: '1000:1000' });
    }
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
  // With what compose demands from the operator: without it, it refuses the file.
  const result = spawnSync('docker', ['compose', '-f', 'docker-compose.yml', 'config', '--quiet'], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, ...OPERATOR_ENV },
  });
  expect({ status: result.status, stderr: result.stderr }).toEqual({ status: 0, stderr: '' });
});
