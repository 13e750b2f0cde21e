import { z } from 'zod';
import {
  describeHandler,
  QUERY_DOCS,
  SIGNAL_DOCS,
  UPDATE_DOCS,
  type HandlerDoc,
} from '../../src/workflows/handler-descriptions';

/**
 * The descriptions the Web UI lists beside each handler (and its "Send an Update" form shows) are what an operator
 * copies from: every example they show must be an input the handler accepts, and every field they name must exist.
 */
const handlers: [string, HandlerDoc][] = [
  ...Object.entries(UPDATE_DOCS).map(([name, doc]): [string, HandlerDoc] => [`update ${name}`, doc]),
  ...Object.entries(SIGNAL_DOCS).map(([name, doc]): [string, HandlerDoc] => [`signal ${name}`, doc]),
];
const queries: [string, HandlerDoc][] = Object.entries(QUERY_DOCS).map(([name, doc]) => [`query ${name}`, doc]);

/** Every `{…}` in backticks: the inputs a description offers to copy. */
function examplesShown(text: string): string[] {
  return [...text.matchAll(/`(\{.*?\})`/g)].map((m) => m[1]!);
}

/** The top-level fields a schema accepts (each option's, for a union). */
function fieldsOf(schema: z.ZodType): string[] {
  if (schema instanceof z.ZodObject) return Object.keys(schema.shape);
  if (schema instanceof z.ZodDiscriminatedUnion) {
    return [...new Set((schema.options as z.ZodType[]).flatMap((o) => fieldsOf(o)))];
  }
  throw new Error('an input schema is an object or a union of objects');
}

test.each(handlers)('every example the description of %s shows parses with its input schema', (_, doc) => {
  const text = describeHandler(doc);
  const shown = examplesShown(text);
  expect(shown.length).toBeGreaterThan(0);
  expect(shown).toHaveLength(doc.input!.examples.length);
  for (const json of shown) {
    const parsed = doc.input!.schema.safeParse(JSON.parse(json));
    expect({ json, issues: parsed.error?.issues }).toEqual({ json, issues: undefined });
  }
});

test.each(handlers)('the description of %s names every input field, and only those', (_, doc) => {
  const text = describeHandler(doc);
  const fields = fieldsOf(doc.input!.schema);
  expect(Object.keys(doc.input!.fields).sort()).toEqual([...fields].sort());
  for (const field of fields) expect(text).toContain(`\`${field}\``);
});

test.each(queries)('the description of %s says it takes no input', (_, doc) => {
  expect(describeHandler(doc)).toMatch(/No input\.$/);
  expect(examplesShown(describeHandler(doc))).toEqual([]);
});

test('a description reads as the operator sees it', () => {
  expect(describeHandler(UPDATE_DOCS.pause)).toBe(
    'Checkpoint the session, then stop its runtime to free compute; returns the checkpoint. Input: `reason`: why, ' +
      'kept in the timeline and shown in the current details; `idempotencyKey`: a repeat with the same key gets the ' +
      'first outcome, across runs too; `ifHead`: apply only while this checkpoint id is the head, else Conflict; ' +
      '`ifIndex`: apply only while the head is at this timeline index, else Conflict (all optional). Examples: ' +
      '`{"reason":"maintenance"}` or `{}`.',
  );
  expect(describeHandler(UPDATE_DOCS.drain)).toContain('`hostTaskQueue` (required): the draining host');
});
