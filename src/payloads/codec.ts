import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { WorkflowService } from '@temporalio/client';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import type { Keyring } from '../snapshots/keys';
import { PayloadKeyUnavailableError, PayloadTamperedError } from './errors';

/** The metadata of an encrypted payload; the names Temporal's samples use, so its tools recognise one. */
export const ENCRYPTED_ENCODING = 'binary/encrypted';
export const KEY_ID_METADATA = 'encryption-key-id';

const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** What a codec does with new payloads, and the key it seals them under. */
export interface PayloadEncryption {
  mode: 'aes-256-gcm' | 'none';
  /** The key new payloads are sealed under (aes-256-gcm only). */
  primaryKeyId?: string;
}

/**
 * Encrypts every payload (AES-256-GCM, a fresh nonce each) under the keyring's primary payload key, and decrypts
 * those sealed under any key the keyring holds: rotating means adding a key as primary and keeping the old ones while
 * histories still hold their payloads.
 *
 * Plaintext payloads pass through `decode` unchanged: histories written before encryption was turned on stay
 * readable. With `encrypt: false` (DS_PAYLOAD_ENCRYPTION=none) new payloads stay plaintext, and those already
 * encrypted are still read with the keys configured (a rollout turns decryption on everywhere before encryption).
 */
export class PayloadEncryptionCodec implements PayloadCodec {
  constructor(
    private readonly keyring: Keyring | null,
    private readonly encrypt = keyring !== null,
  ) {
    if (encrypt && !keyring) throw new TypeError('encrypting payloads needs a keyring');
  }

  describe(): PayloadEncryption {
    return this.encrypt && this.keyring
      ? { mode: 'aes-256-gcm', primaryKeyId: this.keyring.primaryKeyId }
      : { mode: 'none' };
  }

  encode(payloads: Payload[]): Promise<Payload[]> {
    const keyring = this.keyring;
    if (!this.encrypt || !keyring) return Promise.resolve(payloads);
    const keyId = keyring.primaryKeyId;
    const key = keyring.get(keyId);
    return Promise.resolve(
      payloads.map((payload) => {
        const nonce = randomBytes(NONCE_BYTES);
        const cipher = createCipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_BYTES });
        cipher.setAAD(aad(keyId));
        const plain = temporal.api.common.v1.Payload.encode(payload).finish();
        const data = Buffer.concat([nonce, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
        return {
          metadata: { encoding: encoder.encode(ENCRYPTED_ENCODING), [KEY_ID_METADATA]: encoder.encode(keyId) },
          data,
        };
      }),
    );
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => this.decodeOne(payload));
  }

  private decodeOne(payload: Payload): Payload {
    if (!isEncrypted(payload)) return payload;
    const rawId = payload.metadata?.[KEY_ID_METADATA];
    if (!rawId) throw new PayloadTamperedError(`an encrypted payload has no ${KEY_ID_METADATA}`);
    const keyId = decoder.decode(rawId);
    if (!this.keyring?.has(keyId)) throw new PayloadKeyUnavailableError(keyId);
    const data = payload.data ?? new Uint8Array();
    if (data.length < NONCE_BYTES + TAG_BYTES) {
      throw new PayloadTamperedError(`an encrypted payload of ${data.length} bytes is too short`, keyId);
    }
    const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    const decipher = createDecipheriv('aes-256-gcm', this.keyring.get(keyId), bytes.subarray(0, NONCE_BYTES), {
      authTagLength: TAG_BYTES,
    });
    decipher.setAAD(aad(keyId));
    decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
    let plain: Buffer;
    try {
      plain = Buffer.concat([decipher.update(bytes.subarray(NONCE_BYTES, bytes.length - TAG_BYTES)), decipher.final()]);
    } catch {
      throw new PayloadTamperedError(`an encrypted payload under key '${keyId}' failed authentication`, keyId);
    }
    const decoded = temporal.api.common.v1.Payload.decode(plain);
    return { metadata: decoded.metadata, data: decoded.data };
  }
}

/** One line for logs and `status`: whether Temporal's history holds this process's payloads in plaintext. */
export function describePayloadEncryption(encryption: PayloadEncryption): string {
  return encryption.mode === 'none'
    ? 'payloads are written to Temporal in PLAINTEXT (DS_PAYLOAD_ENCRYPTION=none)'
    : `payloads are encrypted (AES-256-GCM) under payload key ${encryption.primaryKeyId}`;
}

/** Whether `payload` is sealed by this codec (its `encoding` metadata says so). */
export function isEncrypted(payload: Payload): boolean {
  const encoding = payload.metadata?.encoding;
  return encoding !== undefined && encoding !== null && decoder.decode(encoding) === ENCRYPTED_ENCODING;
}

/** The key id is bound in: a payload relabelled with another id fails to authenticate instead of decrypting. */
function aad(keyId: string): Buffer {
  return Buffer.from(`durable-sessions payload v1 ${keyId}`, 'utf8');
}

/** How a session's history holds its payloads, read from the history itself (its first event's input). */
export type HistoryEncryption = { mode: 'aes-256-gcm'; keyId: string } | { mode: 'none' };

/**
 * Whether Temporal keeps this workflow run's payloads encrypted, and under which key: what `status` reports. One
 * history event is read, raw (no codec): what an operator without the keys would see.
 */
export async function historyEncryption(
  service: WorkflowService,
  namespace: string,
  execution: { workflowId: string; runId?: string },
): Promise<HistoryEncryption> {
  const { history } = await service.getWorkflowExecutionHistory({ namespace, execution, maximumPageSize: 1 });
  const input = history?.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
  if (!input || !isEncrypted(input)) return { mode: 'none' };
  const keyId = input.metadata?.[KEY_ID_METADATA];
  return { mode: 'aes-256-gcm', keyId: keyId ? decoder.decode(keyId) : '?' };
}
