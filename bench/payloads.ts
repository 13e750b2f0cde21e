/**
 * What payload encryption costs a control: the payload codec's encode and decode per payload, at the sizes sessions
 * send (a CheckpointRef, a typical spec, the largest spec), against the JSON payload converter alone measured in the
 * same run; and that cost beside one control's round trip (`bench/controls`, p50 ≈ the `--control-ms` given).
 *
 *   npx tsx bench/payloads.ts [--quick] [--control-ms 95]
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { defaultPayloadConverter } from '@temporalio/common';
import { PayloadEncryptionCodec } from '../src/payloads';
import { Keyring } from '../src/snapshots';

const { values } = parseArgs({
  options: { quick: { type: 'boolean', default: false }, 'control-ms': { type: 'string', default: '95' } },
  strict: true,
});
const controlMs = Number(values['control-ms']);
const codec = new PayloadEncryptionCodec(new Keyring([{ id: 'bench-1', key: randomBytes(32) }]));

/** A value whose JSON is about `bytes` long: a spec with an env and a seed file of that size. */
function valueOf(bytes: number): unknown {
  return { sessionId: 'bench', runtime: { kind: 'workspace', command: ['sh'], files: { seed: 'x'.repeat(bytes) } } };
}

/** Mean microseconds per call of `fn` over at least `ms` of repetitions (after a warm-up). */
async function perCall(fn: () => unknown, ms: number): Promise<number> {
  for (let i = 0; i < 50; i++) await fn();
  let n = 0;
  const start = process.hrtime.bigint();
  let elapsed = 0;
  while (elapsed < ms * 1e6) {
    for (let i = 0; i < 20; i++) await fn();
    n += 20;
    elapsed = Number(process.hrtime.bigint() - start);
  }
  return elapsed / n / 1e3;
}

async function main(): Promise<void> {
  const ms = values.quick ? 300 : 2_000;
  const rows: string[] = [];
  for (const [name, bytes] of [
    ['CheckpointRef (400 B)', 400],
    ['spec (4 KiB)', 4 * 1024],
    ['largest spec (256 KiB)', 256 * 1024],
  ] as const) {
    const value = valueOf(bytes);
    const json = await perCall(() => defaultPayloadConverter.fromPayload(defaultPayloadConverter.toPayload(value)), ms);
    const sealed = await perCall(async () => {
      const [p] = await codec.encode([defaultPayloadConverter.toPayload(value)]);
      return defaultPayloadConverter.fromPayload((await codec.decode([p!]))[0]!);
    }, ms);
    const added = sealed - json;
    rows.push(
      `| ${name} | ${json.toFixed(1)} | ${sealed.toFixed(1)} | ${(sealed / json).toFixed(2)}× | ` +
        `${((added / 1e3 / controlMs) * 100).toFixed(3)}% |`,
    );
  }
  console.log('\n## Payload encryption (one payload: encode + decode, µs)\n');
  console.log(`| payload | JSON only | JSON + AES-256-GCM codec | ratio | added ÷ one control (${controlMs} ms) |`);
  console.log('| --- | ---: | ---: | ---: | ---: |');
  for (const row of rows) console.log(row);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
