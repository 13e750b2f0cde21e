/** Writes docs/providers.openapi.json from the provider protocol's schemas (`npm run openapi:providers`). */
import fs from 'node:fs';
import path from 'node:path';
import { providerOpenApiDocument } from '../src/providers/openapi';

const file = path.resolve(__dirname, '..', 'docs', 'providers.openapi.json');
fs.writeFileSync(file, `${JSON.stringify(providerOpenApiDocument(), null, 2)}\n`);
console.log(`wrote ${path.relative(process.cwd(), file)}`);
