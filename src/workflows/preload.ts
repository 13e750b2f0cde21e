/**
 * The modules every workflow of a worker thread shares. The SDK evaluates the rest of the bundle once per workflow it
 * creates or replays; our zod schemas were most of that work and of an idle workflow's memory. What is loaded here
 * is evaluated once, before any workflow, so these modules must keep no state of their own.
 */
import { regexes } from 'zod/v4/core';
import * as conversation from '../domain/conversation';
import * as names from '../domain/names';
import * as placement from '../domain/placement';
import * as records from '../domain/records';
import * as schemas from '../domain/schemas';
import * as sessionState from '../domain/session-state';
import * as strict from '../domain/strict';
import * as controls from '../api/controls';
import * as messages from '../api/messages';

/**
 * The SDK deep-freezes what is shared, but two kinds of object must stay writable: zod finishes a schema at its first
 * parse by writing to it, and a regex check resets the pattern's `lastIndex`. So every module this one loads is frozen
 * here first, all but those; the SDK's freeze does not walk into an object that is frozen already. zod's own patterns
 * are exported by its `regexes` module. test/workflows/shared-modules.test.ts finds any the freeze still reaches.
 */
for (const moduleExports of [
  conversation,
  names,
  placement,
  records,
  schemas,
  sessionState,
  strict,
  controls,
  messages,
])
  freezeShared(moduleExports);
Object.freeze(regexes);

function freezeShared(value: unknown, seen = new WeakSet<object>()): void {
  if (value === null || typeof value !== 'object' || seen.has(value)) return;
  seen.add(value);
  if (value instanceof RegExp || '_zod' in value) return;
  // Through getters too: a bundled module's exports are getters over its bindings.
  for (const key of Reflect.ownKeys(value)) freezeShared(Reflect.get(value, key), seen);
  Object.freeze(value);
}
