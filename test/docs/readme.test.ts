import { testDocument } from '../helpers/doc-test';

/**
 * README.md as a new user follows it: every block in order against a fresh `npm start`; console blocks print what
 * they show (up to ids, digests, times and numbers). Blocks that cannot run here say why in the Markdown.
 */
testDocument('README.md');
