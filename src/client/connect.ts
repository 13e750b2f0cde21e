import { Client, Connection } from '@temporalio/client';
import type { Config } from '../config';
import { dataConverterFromConfig } from '../payloads';
import { connectionOptions, temporalAddress } from '../temporal-connection';

/**
 * A Temporal client wired as the worker's configuration says: the frontend (TEMPORAL_ADDRESS, or else the embedded
 * server `npm start` runs), its TLS or API key, the namespace and the payload codec. A client without the codec would
 * send specs in plaintext and could not read the sealed answers of an encrypted deployment.
 * @throws MissingPayloadKeyError when payloads are encrypted and no payload key is configured; the connection's own
 *   error when Temporal does not answer.
 */
export async function connectTemporalClient(config: Config): Promise<Client> {
  // The codec first: a missing key is refused before a connection is opened that nothing would close.
  const dataConverter = await dataConverterFromConfig(config);
  const connection = await Connection.connect(await connectionOptions(config, temporalAddress(config)));
  return new Client({ connection, namespace: config.temporal.namespace, dataConverter });
}
