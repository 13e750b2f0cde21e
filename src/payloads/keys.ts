import fs from 'node:fs/promises';
import path from 'node:path';
import type { Config } from '../config';
import { Keyring, type KeyVariables } from '../snapshots';
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
  // The keyring reads variables: these are the configuration's values, not the process's environment.
  const env = { DS_PAYLOAD_KEYS: keys, DS_PAYLOAD_KEY_PRIMARY: primary };
  if (keyDir) return Keyring.fromDirectory(keyDir, env, PAYLOAD_KEY_VARIABLES);
  if (keys) return Keyring.fromEnv(env, PAYLOAD_KEY_VARIABLES);
  const fallback = defaultPayloadKeyDir(config.dataDir);
  if (
    await fs.stat(fallback).then(
      (st) => st.isDirectory(),
      () => false,
    )
  ) {
    return Keyring.fromDirectory(fallback, env, PAYLOAD_KEY_VARIABLES);
  }
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
