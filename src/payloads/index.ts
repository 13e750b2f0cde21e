/**
 * Temporal payloads encrypted end to end: workflow inputs, update, signal and query arguments and results, memo,
 * user metadata, heartbeat details and failure messages leave this process sealed (AES-256-GCM, key id in the
 * payload's metadata). Search attributes are never encoded by Temporal, so nothing secret goes there.
 */
export {
  describePayloadEncryption,
  ENCRYPTED_ENCODING,
  historyEncryption,
  type HistoryEncryption,
  isEncrypted,
  KEY_ID_METADATA,
  PayloadEncryptionCodec,
  type PayloadEncryption,
} from './codec';
export {
  dataConverterFromConfig,
  FAILURE_CONVERTER_PATH,
  sessionDataConverter,
  type SessionDataConverter,
} from './data-converter';
export { MissingPayloadKeyError, PayloadKeyUnavailableError, PayloadTamperedError } from './errors';
export { ensureDevPayloadKey, PAYLOAD_KEY_VARIABLES, payloadKeyringFromConfig } from './keys';
