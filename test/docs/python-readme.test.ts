import { testDocument } from '../helpers/doc-test';

/** python/README.md as a Python user follows it, against a fresh `npm start` (its client from this checkout). */
testDocument('python/README.md', {
  // Its flow starts `npm run dev` in an empty workspace: the command exits at once, the session fails, and the next
  // call raises SessionClosedError. Unskip once the flow starts a command that runs (issue 22, "Documentation").
  skip: 'known to fail: its workspace command exits at once',
});
