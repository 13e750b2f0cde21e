import { DurableSessionsError } from '../errors';

/**
 * Thrown when an encrypted payload names a payload key this process does not hold (never configured, or removed
 * while payloads sealed under it are still read). Configure the key in DS_PAYLOAD_KEYS or DS_PAYLOAD_KEY_DIR.
 */
export class PayloadKeyUnavailableError extends DurableSessionsError {
  readonly code = 'KeyUnavailable';
  constructor(readonly keyId: string) {
    super(
      `a payload is encrypted under payload key '${keyId}', which is not configured here: add it to DS_PAYLOAD_KEYS ` +
        'or DS_PAYLOAD_KEY_DIR (keys stay configured while any history still holds payloads sealed under them)',
    );
  }
}

/**
 * Thrown when an encrypted payload fails authentication: its bytes were altered, cut short, or sealed under another
 * key of the same id. Nothing of it is returned.
 */
export class PayloadTamperedError extends DurableSessionsError {
  readonly code = 'PayloadTampered';
  constructor(
    message: string,
    readonly keyId?: string,
  ) {
    super(message);
  }
}

/** Thrown when payload encryption is on and no payload key is configured: payloads are never silently plaintext. */
export class MissingPayloadKeyError extends DurableSessionsError {
  readonly code = 'InvalidConfig';
  constructor() {
    super(
      'payload encryption is on but no payload key is configured: set DS_PAYLOAD_KEYS (id:base64,...) or ' +
        'DS_PAYLOAD_KEY_DIR (a directory of <id>.key files), or DS_PAYLOAD_ENCRYPTION=none to keep payloads in ' +
        'plaintext',
    );
  }
}
