import { DefaultFailureConverter } from '@temporalio/common';

/**
 * Failure messages and stack traces travel as an encoded payload (so through the payload codec), not as plaintext
 * fields of the failure: a message often quotes a command's output or a path. Loaded by the worker, the workflow
 * bundle and every client (`failureConverterPath`); failures recorded before it are read as they are.
 */
export const failureConverter = new DefaultFailureConverter({ encodeCommonAttributes: true });
