import { createCipheriv, createHash } from 'node:crypto';

/** Deterministic incompressible bytes: an AES-CTR keystream under a key made from `seed`. */
export function seeded(seed: number, length: number): Buffer {
  const key = createHash('sha256').update(String(seed)).digest();
  return createCipheriv('aes-256-ctr', key, Buffer.alloc(16)).update(Buffer.alloc(length));
}
