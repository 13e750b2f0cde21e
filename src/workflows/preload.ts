/**
 * The modules every workflow of a worker thread shares. The SDK evaluates the rest of the bundle once per workflow it
 * creates or replays; our zod schemas (about a thousand) were most of that work and of an idle workflow's memory. What
 * is loaded here is evaluated once, before any workflow, so these modules must keep no state of their own.
 */
import * as conversation from '../domain/conversation';
import * as placement from '../domain/placement';
import * as records from '../domain/records';
import * as schemas from '../domain/schemas';
import * as controls from '../api/controls';

/**
 * The SDK deep-freezes what is shared, but zod finishes a schema at its first parse by writing to it, so a frozen
 * schema throws there. An object that is frozen already is not walked into: freezing each exports object that holds
 * schemas keeps its bindings fixed and leaves the schemas to finish themselves, the same way in every workflow.
 */
for (const moduleExports of [conversation, placement, records, schemas, controls]) Object.freeze(moduleExports);
