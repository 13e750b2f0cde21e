import type { DataConverter } from '@temporalio/common';
import type { Config } from '../config';
import { PayloadEncryptionCodec } from './codec';
import { payloadKeyringFromConfig } from './keys';

/** The module with the failure converter, for `failureConverterPath` and the workflow bundle. */
export const FAILURE_CONVERTER_PATH = require.resolve('./failure-converter');

/**
 * What a worker, its workflow bundle and a client all use: one codec and, while it encrypts, failures whose message
 * and stack go through it. (Failures are read either way: a client without it reads encoded ones too.)
 */
export interface SessionDataConverter extends DataConverter {
  payloadCodecs: [PayloadEncryptionCodec];
}

export function sessionDataConverter(codec: PayloadEncryptionCodec): SessionDataConverter {
  return {
    payloadCodecs: [codec],
    ...(codec.describe().mode === 'none' ? {} : { failureConverterPath: FAILURE_CONVERTER_PATH }),
  };
}

/** The data converter the configuration describes (DS_PAYLOAD_ENCRYPTION and the payload keys). */
export async function dataConverterFromConfig(config: Config): Promise<SessionDataConverter> {
  const keyring = await payloadKeyringFromConfig(config);
  return sessionDataConverter(new PayloadEncryptionCodec(keyring, config.payloads.encryption !== 'none'));
}
