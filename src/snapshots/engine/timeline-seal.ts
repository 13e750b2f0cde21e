/**
 * How the chunked store seals timeline records (timeline-log.ts has the log itself). With master keys, each record is
 * a sealed object of crypto.ts, kind 'timeline', AES-256-GCM under the data key of the session's lineage (a fork's
 * records are under its origin's key, like its chunks); its authenticated header names tenant, lineage, session and
 * index, so a record copied to another session or index, or altered, is SnapshotTampered. Without keys the records
 * are format 1's plaintext ones.
 */
import { KeyUnavailableError, SnapshotTamperedError } from '../errors';
import {
  plainTimelineSealer,
  PLAIN_RECORD,
  SEALED_RECORD,
  TIMELINE_FORMAT_VERSION,
  type TimelineSealer,
} from '../timeline-log';
import type { ChunkKey } from './chunk-work';
import { openObject, sealObject } from './crypto';

/** The sealer of `sessionId`'s records; `key` is its lineage's data key, null in a store without master keys. */
export function timelineSealer(
  at: { tenant: string; lineage: string; sessionId: string },
  key: ChunkKey | null,
): TimelineSealer {
  const { tenant, lineage, sessionId } = at;
  const plain = plainTimelineSealer(sessionId);
  const binding = (index: number) => ({
    kind: 'timeline' as const,
    tenant,
    lineage,
    objectId: String(index),
    sessionId,
  });
  if (!key) {
    return {
      kind: PLAIN_RECORD,
      seal: plain.seal,
      open: (index, kind, body) => {
        if (kind === SEALED_RECORD) {
          throw new KeyUnavailableError(
            `timeline record ${index} of session ${sessionId} is encrypted and this store runs without encryption keys`,
            'keyring',
            'master',
            { sessionId, objectId: `timeline/${index}` },
          );
        }
        return plain.open(index, kind, body);
      },
    };
  }
  return {
    kind: SEALED_RECORD,
    seal: (index, json) =>
      sealObject(json, key.key, {
        ...binding(index),
        formatVersion: TIMELINE_FORMAT_VERSION,
        codec: 0,
        dataKeyId: key.dataKeyId,
      }),
    open: (index, kind, body) => {
      if (kind !== SEALED_RECORD) {
        // No silent downgrade: with keys, a plaintext record is not one this store wrote.
        throw new SnapshotTamperedError(
          `timeline record ${index} of session ${sessionId} is not encrypted`,
          'tampered',
          { sessionId, objectId: `timeline/${index}` },
        );
      }
      const { plaintext } = openObject(body, () => key.key, {
        ...binding(index),
        formatVersion: TIMELINE_FORMAT_VERSION,
        encrypted: true,
        dataKeyId: key.dataKeyId,
      });
      return plaintext;
    },
  };
}
