import { z } from 'zod';
import { closestName } from './names';

export { closestName };

/**
 * Objects that refuse keys they do not know. A silently dropped key is a wrong answer: `{"checkpoint_id": …}` from a
 * Python caller would restore the head instead of the checkpoint asked for. The zod issue names each unknown key and the
 * field it probably meant.
 */
export function strictObject<Shape extends z.ZodRawShape>(shape: Shape) {
  const known = Object.keys(shape);
  return z.strictObject(shape, {
    error: (issue) => (issue.code === 'unrecognized_keys' ? unknownKeysMessage(issue.keys, known) : undefined),
  });
}

/** `unknown field "checkpoint_id" (did you mean "checkpointId"?)`, one clause per key. */
export function unknownKeysMessage(keys: readonly string[], known: readonly string[]): string {
  return keys
    .map((key) => {
      // A schema derived by omit() keeps its parent's names: the key itself is no suggestion.
      const near = closestName(
        key,
        known.filter((name) => name !== key),
      );
      return `unknown field ${JSON.stringify(key)}${near ? ` (did you mean ${JSON.stringify(near)}?)` : ''}`;
    })
    .join('; ');
}
