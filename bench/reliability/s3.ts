/**
 * Scenario 4: the snapshot store is a bucket on a real S3 server (versitygw), which the worker reaches through a
 * fault-injecting proxy on loopback (test/helpers/fault-proxy.ts) and this process reads directly. Faults: kill -9 of
 * the worker while a capture streams a multipart upload; the S3 server killed and restarted while a restore reads;
 * 503s and slow answers; the worker cut off from the server while Temporal still reaches it; an object of a
 * checkpoint tampered with or swapped in the bucket. Unfinished multipart uploads count as leaked objects.
 */
import { ListMultipartUploadsCommand, ListPartsCommand, type S3Client } from '@aws-sdk/client-s3';
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { StoreUnavailableError } from '../../src/domain/errors';
import { messageOf } from '../../src/errors';
import { ABANDONED_AFTER_MS, S3BlobBackend } from '../../src/snapshots';
import { FaultProxy } from '../../test/helpers/fault-proxy';
import { startS3Server, type S3TestServer } from '../../test/helpers/s3-server';
import type { Cluster, WorkerProcess } from './cluster';
import { progress, type Context } from './context';
import { identityOf } from '../../src/runtimes/workspace/process-table';
import type { Subject } from './judge';
import type { LeakedFile } from './host';
import { checkpointFiles, FAST_LIVENESS, liveFiles, sameBlobs, writeBlobs } from './workload';

const MiB = 1024 * 1024;
/** Blob files of 8 MiB: 24 MiB of fresh bytes, a pack of three 8 MiB parts, so every capture is a multipart upload. */
const BIG_BLOB_BYTES = 8 * MiB;
/** How long the S3 server stays down when it is killed mid-restore: within what the backend and activity retry. */
const SERVER_DOWN_MS = 3_000;
/** A checkpoint's manifest is the object `<session>/<checkpoint>.manifest` (src/snapshots/engine/layout.ts). */
const MANIFEST_SUFFIX = '.manifest';
/** Error codes a control may fail with when the store is damaged or away: typed, the session still whole. */
const TYPED_STORE_FAILURES = ['StoreUnavailable', 'SnapshotTampered', 'SnapshotCorrupt', 'SnapshotNotFound'];

export interface S3Plan {
  /** kill -9 trials during a multipart capture, and server kills during a restore. */
  trials: number;
  /** 503s on every request for this long, then answers slowed by SLOW_MS for as long. */
  stormMs: number;
  /** Also a storm of 503s that outlasts every retry, so the checkpoint fails typed (minutes: the full run only). */
  pastBound: boolean;
  /** Seconds the worker is cut off from the server, one trial each. */
  cutsS: number[];
}

const SLOW_MS = 1_500;

export const S3_ROWS = {
  capture: 'S3: kill -9 during multipart capture',
  restore: 'S3: server killed during restore',
  storm: 'S3: 503s, then slow answers',
  pastBound: 'S3: 503s past every retry',
  tamper: 'S3: tampered or swapped object',
} as const;

export function cutRow(seconds: number): string {
  return `S3: worker cut off from S3 ${seconds} s`;
}

export function s3RowNames(plan: S3Plan): string[] {
  const { capture, restore, storm, pastBound, tamper } = S3_ROWS;
  return [capture, restore, storm, ...(plan.pastBound ? [pastBound] : []), ...plan.cutsS.map(cutRow), tamper];
}

interface Upload {
  key: string;
  uploadId: string;
}

/** The bucket, the proxy in the worker's way, and the S3 host's context. */
class Bucket {
  private readonly admin: S3Client;

  constructor(
    readonly ctx: Context,
    readonly server: S3TestServer,
    readonly proxy: FaultProxy,
    readonly prefix: string,
  ) {
    this.admin = server.client();
  }

  /** Multipart uploads begun under the store's prefix and neither completed nor aborted. */
  async uploads(): Promise<Upload[]> {
    const listed = await this.admin.send(
      new ListMultipartUploadsCommand({ Bucket: this.server.bucket, Prefix: `${this.prefix}/` }),
    );
    return (listed.Uploads ?? []).map((u) => ({ key: u.Key!, uploadId: u.UploadId! }));
  }

  /** How many parts each upload opened since `known` holds. */
  async uploadedParts(known: ReadonlySet<string>): Promise<number[]> {
    const fresh = (await this.uploads()).filter((u) => !known.has(u.uploadId));
    return Promise.all(
      fresh.map(async ({ key, uploadId }) => {
        const parts = await this.admin
          .send(new ListPartsCommand({ Bucket: this.server.bucket, Key: key, UploadId: uploadId }))
          .catch(() => undefined);
        return parts?.Parts?.length ?? 0;
      }),
    );
  }

  /** Each open upload as a leaked object: its parts' bytes, named by key and upload id. */
  async leakedUploads(tag = ''): Promise<LeakedFile[]> {
    const leaked: LeakedFile[] = [];
    for (const { key, uploadId } of await this.uploads()) {
      const parts = await this.admin
        .send(new ListPartsCommand({ Bucket: this.server.bucket, Key: key, UploadId: uploadId }))
        .catch(() => undefined);
      const bytes = (parts?.Parts ?? []).reduce((n, p) => n + (p.Size ?? 0), 0);
      leaked.push({ path: `s3://${this.server.bucket}/${key} (upload ${uploadId.slice(0, 12)}…)${tag}`, bytes });
    }
    return leaked;
  }

  /** Counts the open uploads under `row` (each once, however many checks see it). */
  async countUploads(row: string, when: string): Promise<void> {
    this.ctx.tally.leaks(() => row, await this.leakedUploads(), `${when}: multipart uploads never finished`);
  }

  close(): void {
    this.admin.destroy();
  }
}

/** Runs every S3 row on a host of its own, with its own S3 server and proxy; stops them at the end. */
export async function s3Scenarios(
  cluster: Cluster,
  context: (host: ReturnType<Cluster['host']>) => Context,
  plan: S3Plan,
) {
  const server = await startS3Server({ bucket: 'ds-reliability' });
  cluster.closers.push(() => server.stop());
  const proxy = await FaultProxy.start(server.port);
  cluster.closers.push(() => proxy.stop());
  const prefix = `fleet-${randomBytes(3).toString('hex')}`;
  const host = cluster.host('s3', {
    bucket: server.bucket,
    prefix,
    region: server.region,
    credentials: server.credentials,
    endpoint: server.endpoint,
    workerEndpoint: proxy.endpoint,
  });
  const ctx = context(host);
  const bucket = new Bucket(ctx, server, proxy, prefix);
  try {
    await host.startWorker();
    for (let trial = 1; trial <= plan.trials; trial++) {
      progress(`S3: kill -9 during a multipart capture, trial ${trial}`);
      await killDuringCapture(bucket, trial);
    }
    for (let trial = 1; trial <= plan.trials; trial++) {
      progress(`S3: the server killed during a restore, trial ${trial}`);
      await serverKilledDuringRestore(bucket, trial);
    }
    progress(`S3: 503s for ${plan.stormMs} ms, then answers ${SLOW_MS} ms slow`);
    await storm(bucket, plan.stormMs);
    if (plan.pastBound) {
      progress('S3: 503s until the checkpoint gives up');
      await stormPastBound(bucket);
    }
    for (const seconds of plan.cutsS) {
      progress(`S3: the worker cut off from the server for ${seconds} s`);
      await cutOff(bucket, seconds);
    }
    progress('S3: tampered and swapped objects');
    await tampered(bucket);
    await leftovers(bucket);
  } finally {
    bucket.close();
  }
}

/**
 * A capture of 24 MiB of new bytes, struck by kill -9 of the worker once its multipart upload is open; then the next
 * worker. Nothing of the capture may be half-visible, the session runs again from its newest checkpoint.
 */
async function killDuringCapture(b: Bucket, trial: number): Promise<void> {
  const { ctx } = b;
  const row = S3_ROWS.capture;
  const worker = ctx.host.currentWorker ?? (await ctx.host.startWorker());
  const subject = await ctx.runningCounter(row, `s3-capture-${trial}`, FAST_LIVENESS, false);
  const location = (await subject.handle.status()).runtime!.location;
  subject.blobVersions.push(await writeBlobs(location, BIG_BLOB_BYTES));
  subject.acked.push(await subject.handle.checkpoint());
  subject.blobVersions.push(await writeBlobs(location, BIG_BLOB_BYTES));
  const before = new Set((await b.uploads()).map((u) => u.uploadId));
  const began = Date.now();
  subject.begin('capture', () => subject.handle.checkpoint());
  // Odd trials strike as the upload opens, even ones once a part of it is stored.
  const stored = trial % 2 === 0 ? 1 : 0;
  const open = await until(
    async () => (await b.uploadedParts(before)).some((parts) => parts >= stored),
    subject,
    60_000,
  );
  if (!open) ctx.tally.findings.push(`NOTE — ${row} trial ${trial}: the capture answered before an upload was seen`);
  const struckAt = Date.now();
  await ctx.host.killWorker(worker);
  Object.assign(subject.operation!, { offsetMs: struckAt - began, struckAt });
  await nextWorker(ctx, worker, [subject]);
  await ctx.aftermath([subject], `${row} trial ${trial}`);
  const answer = subject.operation!.outcome;
  ctx.tally.findings.push(
    `NOTE — ${row} trial ${trial}: struck ${struckAt - began} ms into the capture, ` +
      `${open ? `an upload open with ${stored === 0 ? 'no part required' : 'a part stored'}` : 'no upload seen'}; ` +
      `the capture answered ${answer?.ok ? 'ok' : `failed: ${answer?.error}`}`,
  );
  await b.countUploads(row, `${row} trial ${trial}, once settled`);
}

/** A paused session resumed; the S3 server is killed once the restore reads a pack, and started again. */
async function serverKilledDuringRestore(b: Bucket, trial: number): Promise<void> {
  const { ctx, proxy, server } = b;
  const row = S3_ROWS.restore;
  const subject = await ctx.runningCounter(row, `s3-restore-${trial}`, FAST_LIVENESS, false);
  const location = (await subject.handle.status()).runtime!.location;
  subject.blobVersions.push(await writeBlobs(location, BIG_BLOB_BYTES));
  subject.acked.push(await subject.handle.pause());
  // Marks the first read of a pack (a delay of a few ms): the moment the restore is reading the checkpoint's data.
  proxy.clear();
  proxy.inject({
    fault: { kind: 'delay', ms: 50 },
    match: (method, url) => method === 'GET' && url.includes('/packs/'),
  });
  const began = Date.now();
  subject.begin('restore', () => subject.handle.resume());
  const reading = await until(async () => proxy.faulted > 0, subject, 60_000);
  if (!reading) ctx.tally.findings.push(`NOTE — ${row} trial ${trial}: the restore answered before it read a pack`);
  const struckAt = Date.now();
  await server.kill();
  Object.assign(subject.operation!, { offsetMs: struckAt - began, struckAt });
  await delay(SERVER_DOWN_MS);
  await server.restart();
  proxy.clear();
  await ctx.aftermath([subject], `${row} trial ${trial}`);
  await b.countUploads(row, `${row} trial ${trial}, once settled`);
}

/**
 * Every request answered 503 for `stormMs`, then every request slowed by SLOW_MS as long, while a checkpoint and a
 * pause are under way: retried, answered once the store answers, the sessions running and paused. Then the backend
 * itself under 503s that do not stop: StoreUnavailable after its bound, nothing written.
 */
async function storm(b: Bucket, stormMs: number): Promise<void> {
  const { ctx, proxy } = b;
  const row = S3_ROWS.storm;
  const checkpointed = await ctx.runningCounter(row, 's3-storm-checkpoint', FAST_LIVENESS);
  checkpointed.acked.push(await checkpointed.handle.checkpoint());
  const location = (await checkpointed.handle.status()).runtime!.location;
  checkpointed.blobVersions.push(await writeBlobs(location));
  const paused = await ctx.runningMemory(row, 's3-storm-pause', FAST_LIVENESS);
  paused.expected = 'paused';
  await healthy([checkpointed, paused]);

  proxy.clear();
  proxy.inject({ fault: { kind: 'status', status: 503, code: 'SlowDown' } });
  const struckAt = Date.now();
  typed(checkpointed, 'checkpoint', () => checkpointed.handle.checkpoint());
  typed(paused, 'pause', () => paused.handle.pause());
  for (const s of [checkpointed, paused]) Object.assign(s.operation!, { offsetMs: 0, struckAt });
  await delay(stormMs);
  proxy.clear();
  proxy.inject({ fault: { kind: 'delay', ms: SLOW_MS } });
  await delay(stormMs);
  proxy.clear();
  await ctx.aftermath([checkpointed, paused], row);

  // The backend alone, as a worker's store sees it: a create and a streamed (multipart) write under 503s.
  const backend = new S3BlobBackend({
    ...ctx.host.bucket!,
    endpoint: proxy.endpoint,
    forcePathStyle: true,
    retry: { baseDelayMs: 50, maxDelayMs: 400 },
  });
  const direct = ctx.host.store().backend;
  try {
    for (const [what, body, match] of [
      ['a create', randomBytes(1024), undefined],
      [
        'a multipart write',
        (async function* () {
          for (let i = 0; i < 3; i++) yield randomBytes(8 * MiB);
        })(),
        (method: string, url: string) => method === 'PUT' && url.includes('partNumber='),
      ],
    ] as const) {
      proxy.clear();
      proxy.inject({ fault: { kind: 'status', status: 503, code: 'SlowDown' }, ...(match ? { match } : {}) });
      const key = `probe/${randomBytes(4).toString('hex')}`;
      const error = await backend.create(key, body).then(
        () => undefined,
        (err: unknown) => err,
      );
      proxy.clear();
      const visible = await direct.stat(key);
      const open = (await b.uploads()).filter((u) => u.key.endsWith(key));
      const problems = [
        ...(error instanceof StoreUnavailableError ? [] : [`answered ${error ? messageOf(error) : 'ok'}`]),
        ...(visible ? ['the object is visible'] : []),
        ...(open.length > 0 ? [`${open.length} upload(s) left open`] : []),
      ];
      ctx.tally.trial(
        row,
        problems.length === 0 ? 'survived' : 'corrupt',
        `${what} under 503s: ${problems.join('; ')}`,
      );
      await direct.delete(key);
    }
  } finally {
    await backend.close();
  }
}

/** 503s until a checkpoint answers: it must fail as StoreUnavailable, and the session keep running. */
async function stormPastBound(b: Bucket): Promise<void> {
  const { ctx, proxy } = b;
  const row = S3_ROWS.pastBound;
  const subject = await ctx.runningCounter(row, 's3-past-bound', FAST_LIVENESS);
  subject.acked.push(await subject.handle.checkpoint());
  await healthy([subject]);
  proxy.clear();
  proxy.inject({ fault: { kind: 'status', status: 503, code: 'SlowDown' } });
  const struckAt = Date.now();
  const codes: (string | undefined)[] = [];
  subject.begin('checkpoint', () =>
    subject.handle.checkpoint().catch((err: unknown) => {
      codes.push((err as { code?: string }).code);
      throw err;
    }),
  );
  Object.assign(subject.operation!, { offsetMs: 0, struckAt });
  await until(async () => false, subject, 15 * 60_000);
  const tookS = Math.round((Date.now() - struckAt) / 1000);
  proxy.clear();
  const outcome = subject.operation!.outcome;
  ctx.tally.findings.push(`NOTE — ${row}: the checkpoint answered after ${tookS} s: ${JSON.stringify(outcome)}`);
  if (outcome?.ok) subject.notes.push('the checkpoint succeeded although every request was refused');
  else if (codes[0] !== 'StoreUnavailable') {
    subject.problems.push({ verdict: 'lost', detail: `the checkpoint failed as ${codes[0]}, not StoreUnavailable` });
  }
  await ctx.aftermath([subject], row);
}

/**
 * The worker cut off from the server (connections reset) while Temporal still reaches it: a checkpoint and a pause
 * begun meanwhile answer once the path is back, or fail typed with the session running; nothing is lost.
 */
async function cutOff(b: Bucket, seconds: number): Promise<void> {
  const { ctx, proxy } = b;
  const row = cutRow(seconds);
  const tag = `s3-cut${seconds}`;
  // No new files after the checkpoint: a checkpoint that fails typed leaves the instance ahead of its head by the
  // counter alone, which the judge reads as the head continued, not as blobs that differ from it.
  const checkpointed = await ctx.runningCounter(row, `${tag}-checkpoint`, FAST_LIVENESS);
  checkpointed.acked.push(await checkpointed.handle.checkpoint());
  const paused = await ctx.runningCounter(row, `${tag}-pause`, FAST_LIVENESS);
  paused.acked.push(await paused.handle.checkpoint());
  paused.expected = 'paused';
  const memory = await ctx.runningMemory(row, `${tag}-memory`, FAST_LIVENESS);
  await healthy([checkpointed, paused, memory]);

  proxy.sever();
  const struckAt = Date.now();
  typed(checkpointed, 'checkpoint', () => checkpointed.handle.checkpoint());
  typed(paused, 'pause', () => paused.handle.pause());
  typed(memory, 'checkpoint', () => memory.handle.checkpoint());
  for (const s of [checkpointed, paused, memory]) Object.assign(s.operation!, { offsetMs: 0, struckAt });
  await delay(seconds * 1_000);
  proxy.mend();
  await ctx.aftermath([checkpointed, paused, memory], row);
}

/**
 * The store's trouble is not the session's: it keeps its instance, and nothing is added to its timeline but the
 * checkpoints it is asked for (no runtime-lost, no restore).
 */
async function healthy(subjects: readonly Subject[]): Promise<void> {
  for (const s of subjects) {
    s.keepInstance = true;
    s.timelineBefore = (await s.handle.timeline()).length;
  }
}

/**
 * Runs a control that the store's trouble may fail: it must then fail typed, and a pause that failed leaves the
 * session running (it says so), which is where it must settle.
 */
function typed(subject: Subject, name: string, call: () => Promise<unknown>): void {
  subject.begin(name, () =>
    call().catch((err: unknown) => {
      const code = (err as { code?: string }).code;
      if (!TYPED_STORE_FAILURES.includes(code ?? '')) {
        subject.problems.push({ verdict: 'lost', detail: `${name} failed untyped (${code}): ${messageOf(err)}` });
      }
      subject.notes.push(`${name} failed: ${code}: ${messageOf(err)}`);
      if (name === 'pause') subject.expected = 'running';
      throw err;
    }),
  );
}

type Tamper = 'manifest bit flipped' | 'manifest swapped for an older one' | 'pack bit flipped' | 'pack swapped';
const TAMPERS: readonly Tamper[] = [
  'manifest bit flipped',
  'manifest swapped for an older one',
  'pack bit flipped',
  'pack swapped',
];

/**
 * A paused session with two checkpoints, an object of its head damaged or swapped in the bucket, then resumed: the
 * resume fails typed and the session stays paused, or it restores the newest checkpoint that verifies, never other
 * bytes. Then the object is put back, and the session resumes from its head.
 */
async function tampered(b: Bucket): Promise<void> {
  const { ctx } = b;
  const row = S3_ROWS.tamper;
  const store = ctx.host.store();
  const backend = store.backend;
  let otherPack: Buffer | undefined;
  for (const [i, tamper] of TAMPERS.entries()) {
    const subject = await ctx.runningCounter(row, `s3-tamper-${i + 1}`, FAST_LIVENESS);
    const older = await subject.handle.checkpoint();
    subject.acked.push(older);
    const location = (await subject.handle.status()).runtime!.location;
    subject.blobVersions.push(await writeBlobs(location));
    const head = await subject.handle.pause();
    subject.acked.push(head);
    const sid = subject.sessionId;
    const packs: { key: string; modifiedAt: Date; size: number }[] = [];
    for await (const info of backend.list(`${sid}/packs/`)) packs.push(info);
    const newestPack = packs.sort((x, y) => y.modifiedAt.getTime() - x.modifiedAt.getTime())[0]!;
    const key = tamper.startsWith('manifest') ? `${sid}/${head.checkpointId}${MANIFEST_SUFFIX}` : newestPack.key;
    const original = (await backend.read(key))!;
    let damaged: Buffer;
    if (tamper === 'manifest swapped for an older one') {
      damaged = (await backend.read(`${sid}/${older.checkpointId}${MANIFEST_SUFFIX}`))!;
    } else if (tamper === 'pack swapped' && otherPack) {
      damaged = otherPack;
    } else {
      damaged = Buffer.from(original);
      damaged[Math.floor(damaged.length / 2)]! ^= 0x01;
    }
    otherPack ??= (await backend.read(newestPack.key))!;
    await backend.put(key, damaged);

    const struckAt = Date.now();
    let failedAs: string | undefined;
    const resumed = await subject.handle.resume().then(
      () => true,
      (err: unknown) => {
        failedAs = (err as { code?: string }).code;
        subject.notes.push(`${tamper}: the resume failed: ${failedAs}: ${messageOf(err)}`);
        return false;
      },
    );
    ctx.tally.findings.push(
      `NOTE — ${row}: ${tamper} in the head ${head.checkpointId}: ` +
        (resumed
          ? `the resume restored ${(await subject.handle.status()).head?.checkpointId}`
          : `refused: ${failedAs}`),
    );
    if (!resumed && !TYPED_STORE_FAILURES.includes(failedAs ?? '')) {
      subject.problems.push({ verdict: 'lost', detail: `${tamper}: the resume failed untyped (${failedAs})` });
    }
    const status = await subject.handle.status();
    if (!resumed && status.phase !== 'paused') {
      subject.problems.push({
        verdict: 'lost',
        detail: `${tamper}: after the refused resume the session is ${status.phase}`,
      });
    }
    if (resumed) {
      // Restored from something: the newest checkpoint that verifies, whose bytes the instance must hold.
      const restoredFrom = status.head;
      const live = status.runtime ? await liveFiles(status.runtime.location) : undefined;
      const files = restoredFrom ? await checkpointFiles(store, restoredFrom).catch(() => undefined) : undefined;
      subject.notes.push(`${tamper}: the resume succeeded from ${restoredFrom?.checkpointId}`);
      if (!files || !live || !sameBlobs(files.blobs, live.blobs)) {
        subject.problems.push({
          verdict: 'corrupt',
          detail: `${tamper}: resumed from ${restoredFrom?.checkpointId}, whose bytes do not verify or are not the instance's`,
        });
      }
      await subject.handle.pause().catch(() => undefined);
    }
    // The operator puts the object back: the session resumes from its head.
    await backend.put(key, original);
    subject.instancesBefore.add(status.runtime?.instanceId ?? '');
    subject.begin(`resume after ${tamper} was repaired`, () => subject.handle.resume());
    Object.assign(subject.operation!, { offsetMs: 0, struckAt });
    await ctx.aftermath([subject], `${row}: ${tamper}`);
  }
}

/**
 * What the S3 rows left in the bucket once every session is stopped, as gc an hour on (past the leftover age, by the
 * server's clock) finds it: unfinished uploads it cannot abort count as leaked objects of the capture row.
 */
async function leftovers(b: Bucket): Promise<void> {
  const { ctx } = b;
  const store = ctx.host.store();
  const before = (await b.uploads()).length;
  const now = (await store.backend.now()).getTime() + ABANDONED_AFTER_MS + 60_000;
  const report = await store.gc({ now });
  ctx.tally.findings.push(
    `NOTE — S3: gc an hour after the run (by the server's clock) aborted ${report.abandoned.tempFiles} of ${before} ` +
      `unfinished upload(s) and removed ${report.packsRemoved.length} unreferenced pack(s), ${report.bytesRemoved} bytes`,
  );
  const left = await b.leakedUploads(' still open after gc');
  ctx.tally.leaks(() => S3_ROWS.capture, left, 'after gc an hour on: uploads still open');
}

/** Starts the next worker; whatever of the sessions' processes started before it and is still there is an orphan. */
async function nextWorker(ctx: Context, previous: WorkerProcess, subjects: readonly Subject[]): Promise<void> {
  void previous;
  const next = await ctx.host.startWorker();
  const since = identityOf(next.pid)?.startTime ?? Infinity;
  const left = ctx.processes(new Set(subjects.map((s) => s.sessionId))).filter((p) => p.startTime < since);
  ctx.orphans(left, 'still alive after the next worker started');
}

/** Polls `check` until it holds (true), the subject's operation answers or `ms` pass (false). */
async function until(check: () => Promise<boolean>, subject: Subject, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline && subject.operation?.outcome === undefined) {
    if (await check()) return true;
    await delay(20);
  }
  return false;
}
