/**
 * The snapshot layer's second door, for code that needs keys and nothing else: the payload codec of clients and the
 * CLI. It loads no engine (chunker, packs, worker threads), which is most of the layer's load time.
 */
export { Keyring, MASTER_KEY_VARIABLES, type KeySources, type KeyVariables } from './engine/keyring';
