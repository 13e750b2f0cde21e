/** Writes docs/openapi.json from the gateway's routes and the domain's schemas (`npm run openapi`). */
import fs from 'node:fs';
import path from 'node:path';
import { openApiDocument } from '../src/gateway';

const file = path.resolve(__dirname, '..', 'docs', 'openapi.json');
fs.writeFileSync(file, `${JSON.stringify(openApiDocument(), null, 2)}\n`);
console.log(`wrote ${path.relative(process.cwd(), file)}`);
