import path from 'node:path';
import type { Config } from '../config';
import { Keyring, type KeyVariables } from '../snapshots/keys';
import { MissingPayloadKeyError } from './errors';

/** Payload keys are their own keyring, apart from the snapshot master keys: one can rotate or leak without the other. */
export const PAYLOAD_KEY_VARIABLES: KeyVariables = {
  keys: 'DS_PAYLOAD_KEYS',
  primary: 'DS_PAYLOAD_KEY_PRIMARY',
  noun: 'payload key',
};

function defaultPayloadKeyDir(dataDir: string): string {
  return path.join(dataDir, 'payload-keys');
}

/**
 * The payload keys from the configuration: DS_PAYLOAD_KEY_DIR, else DS_PAYLOAD_KEYS, else `<DS_DATA_DIR>/payload-keys`
 * when that folder exists (the embedded default). Null when none is configured and encryption is off: such a process
 * writes plaintext and refuses, with PayloadKeyUnavailableError, what is encrypted.
 * @throws MissingPayloadKeyError when encryption is on and no key is configured; KeyringConfigError for keys that
 *   cannot be loaded.
 */
export async function payloadKeyringFromConfig(config: Config): Promise<Keyring | null> {
  const { encryption, keys, keyDir, primary } = config.payloads;
  const sources = { dir: keyDir, list: keys, primary, defaultDir: defaultPayloadKeyDir(config.dataDir) };
  const keyring = await Keyring.fromSources(sources, PAYLOAD_KEY_VARIABLES);
  if (keyring) return keyring;
  if (encryption === 'none') return null;
  throw new MissingPayloadKeyError();
}

/**
 * For the embedded default only: a payload key generated on first start into `<data>/payload-keys` (mode 0600), so
 * a fresh checkout keeps its histories encrypted with no setup. Production configures its own keys.
 */
export async function ensureDevPayloadKey(dataDir: string): Promise<string> {
  const dir = defaultPayloadKeyDir(dataDir);
  await Keyring.ensureKeyDirectory(dir);
  return dir;
}
