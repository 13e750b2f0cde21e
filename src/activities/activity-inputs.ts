/** What the workflows send the activities and get back: the activities' wire shapes, apart from their code. */
import type { RuntimeInstanceRef, TimelineEntry } from '../api/messages';
import type { Message } from '../domain/conversation';
import type { RuntimeReport } from '../domain/records';
import type { CheckpointRef, CheckpointTrigger, RuntimeSpec } from '../domain/schemas';
import type { ExitInfo } from '../runtimes';
import type { ExitCursor } from './host-state';

/** The session's tenant, when not `default`: which store holds its checkpoints and timeline. */
export interface Tenancy {
  tenant?: string;
}

export interface StartRuntimeInput extends Tenancy {
  sessionId: string;
  instanceId: string;
  spec: RuntimeSpec;
  /** The session's generation: the fencing token of the runtime's calls, kept in the instance's ref (absent: 1). */
  fence?: number;
}

/** Another worker takes over a live instance placed `anywhere`, with the session's new generation. */
export interface TakeOverInput extends Tenancy {
  sessionId: string;
  instance: RuntimeInstanceRef;
  fence: number;
}

export interface CaptureInput extends Tenancy {
  sessionId: string;
  instance: RuntimeInstanceRef;
  checkpointId: string;
  sequence: number;
  parentId: string | null;
  trigger: CheckpointTrigger;
  label?: string;
  /** Timeline entries for the store, appended before the capture (idempotently: a retry appends them again). */
  timeline?: TimelineEntry[];
  /** Stop and dispose of the instance once the checkpoint is published: a pause or stop in one step instead of two. */
  stop?: boolean;
}

/** The checkpoint, and with `stop` asked for, whether the instance was stopped after it. */
export type CapturedCheckpoint = CheckpointRef & { stopped?: boolean };

export interface RestoreInput extends StartRuntimeInput {
  checkpointId: string;
  /**
   * What the workflow recorded when the checkpoint was taken. History cannot be rewritten by whoever can write the
   * store, so a manifest that disagrees (a planted or downgraded checkpoint) is refused.
   */
  expected?: { formatVersion: number; digest: string; encryption?: 'aes-256-gcm' | 'none' };
}

export interface InstanceInput {
  instance: RuntimeInstanceRef;
  graceMs?: number;
  /** Also remove what the instance leaves on its host (stopRuntime): one step instead of two. */
  dispose?: boolean;
}

export type WatchResult = { exited: true; exit: ExitInfo } | { exited: false };

export interface HostLeaseInput {
  /** The instances the monitor watches. */
  instances: string[];
  /** Exits up to here were passed on. */
  after?: ExitCursor;
  /** The monitor's host timeout for this lease: with the heartbeat timeout, the bound of the host's fence. */
  hostTimeoutMs?: number;
}

export interface HostLeaseResult {
  cursor: ExitCursor;
  exits: { instanceId: string; exit: ExitInfo }[];
  released: string[];
  missing: string[];
  /** The host asks its monitor to wait this long before the next lease (its `leaseRestMs`). */
  restMs?: number;
}

/** What a host's monitor tells its sessions: one report each, signalled to the session's workflow. */
export interface TellSessionsInput {
  reports: { sessionWorkflowId: string; report: RuntimeReport }[];
}

export interface TellSessionsResult {
  /** Sessions signalled. */
  told: number;
  /** Sessions whose workflow has ended (or never existed): nothing to tell. */
  gone: number;
}

export interface VerifyCheckpointInput extends Tenancy {
  sessionId: string;
  checkpointId: string;
  expected?: RestoreInput['expected'];
}

export interface AppendTimelineInput extends Tenancy {
  sessionId: string;
  entries: TimelineEntry[];
}

/** One of `index`, `checkpointId` and `messageIndex`. */
/** A page of a session's timeline as the store keeps it (`readTimeline`): for readers that hold no store key. */
export interface ReadTimelineInput extends Tenancy {
  sessionId: string;
  from: number;
  limit: number;
}

/**
 * The checkpoints of a session as the store keeps them, read back on a worker (`verifyStoredCheckpoints`): for readers
 * that hold no store key, when the session has ended and cannot verify them itself.
 */
export interface VerifyStoredInput extends Tenancy {
  sessionId: string;
  /** Only this checkpoint; by default every one the store keeps of the session. */
  checkpointId?: string;
}

export interface FindCheckpointInput extends Tenancy {
  sessionId: string;
  index?: number;
  checkpointId?: string;
  messageIndex?: number;
}

export interface ForkSessionsInput extends Tenancy {
  source: { sessionId: string; checkpointId: string };
  targets: { sessionId: string; checkpointId: string; owner: string; label?: string }[];
}

/** Messages for a `conversation` instance (already parsed as `AppendInput` by the workflow). */
export interface AppendMessagesInput {
  instance: RuntimeInstanceRef;
  messages: Message[];
  /**
   * The index the first message must get (the count the workflow last saw). A retried activity whose first attempt
   * stored the messages answers as that attempt did instead of appending them twice; omitted, a retry appends again.
   */
  at?: number;
}

export interface ReadMessagesInput {
  instance: RuntimeInstanceRef;
  /** The first message to read (0 by default). */
  from?: number;
  /** At most this many (default and most: 1000), and fewer where they would pass MAX_APPEND_BYTES as JSON. */
  limit?: number;
}

export interface ReadMessagesResult {
  messages: Message[];
  /** How many messages the conversation holds: more remain to read when `from + messages.length` is less. */
  messageCount: number;
}
