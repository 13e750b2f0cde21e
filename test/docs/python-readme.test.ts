import { testDocument } from '../helpers/doc-test';

/** python/README.md as a Python user follows it, against a fresh `npm start` (its client from this checkout). */
testDocument('python/README.md', {});
