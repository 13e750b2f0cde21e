import fs from 'node:fs';
import path from 'node:path';
import { SEARCH_ATTRIBUTES } from '../../src/api/search-attributes';
import { sessionErrorFor } from '../../src/client/errors';
import { EnvConfig } from '../../src/config';
import { ERROR_CODES, type ErrorCode } from '../../src/domain/error-codes';
import { RuntimeSpec } from '../../src/domain/schemas';

/**
 * The lists the documentation repeats from the code — runtimes, search attributes (with their types where a list
 * gives them), error codes and classes, configuration variables — hold exactly what the code has: every item, no
 * other. Each list is found by its section and a phrase where it starts, so the documents carry no test markup.
 */

const root = path.resolve(__dirname, '..', '..');

type Kind = 'runtimes' | 'search-attributes' | 'error-codes' | 'error-classes' | 'config-variables';

interface DocList {
  file: string;
  /** The heading (its start) of the section the list is in. */
  section: string;
  /** Where the list starts; when the rest of its paragraph names no item ("… exist:"), the list is the next block. */
  anchor: string;
  kind: Kind;
  /** Names in the list's text that are not items of it. */
  except?: string[];
}

const LISTS: DocList[] = [
  { file: 'README.md', section: '### From TypeScript', anchor: 'Failures are typed', kind: 'error-classes' },
  {
    file: 'README.md',
    section: '### From the Temporal Web UI and CLI',
    anchor: 'with the search attributes',
    kind: 'search-attributes',
  },
  { file: 'README.md', section: '## Configuration', anchor: '| Variable', kind: 'config-variables' },
  {
    file: 'README.md',
    section: '## Configuration',
    anchor: 'temporal operator search-attribute create',
    kind: 'search-attributes',
  },
  { file: 'docs/design.md', section: '## 1.', anchor: 'runtimes exist', kind: 'runtimes' },
  {
    file: 'docs/design.md',
    section: '### 4.3',
    anchor: '`ERROR_CODES` (`src/domain/error-codes.ts`):',
    kind: 'error-codes',
    except: ['SessionClient'],
  },
  {
    file: 'docs/design.md',
    section: '### 9.1',
    anchor: 'temporal operator search-attribute create',
    kind: 'search-attributes',
  },
  { file: 'docs/design.md', section: '### 9.2', anchor: '| Attribute', kind: 'search-attributes' },
  { file: 'docs/design.md', section: '### 9.4', anchor: '| Variable', kind: 'config-variables' },
];

/** What the code has, per kind: item → its type, where the docs give one (search attributes). */
function fromCode(kind: Kind): Map<string, string | undefined> {
  const names = (items: string[]) => new Map(items.map((item) => [item, undefined]));
  switch (kind) {
    case 'runtimes':
      return names(RuntimeSpec.options.map((option) => option.shape.kind.value));
    case 'search-attributes':
      return new Map(Object.entries(SEARCH_ATTRIBUTES));
    case 'error-codes':
      return names(Object.values(ERROR_CODES));
    case 'error-classes':
      return names(
        Object.values(ERROR_CODES).map((code: ErrorCode) => sessionErrorFor(code, '', 's').constructor.name),
      );
    case 'config-variables':
      return names(Object.keys(EnvConfig.shape));
  }
}

const ITEM: Record<Kind, RegExp> = {
  runtimes: /^[a-z]+$/,
  'search-attributes': /^[A-Z][A-Za-z]+$/,
  'error-codes': /^[A-Z][A-Za-z]+$/,
  'error-classes': /^[A-Z][A-Za-z]+Error$/,
  'config-variables': /^[A-Z][A-Z0-9_]+$/,
};

/** The Markdown blocks (paragraphs, tables, lists, fences) of a text, each as its lines. */
function blocks(lines: string[]): string[][] {
  const out: string[][] = [];
  let current: string[] = [];
  let fenced = false;
  for (const line of lines) {
    if (/^```/.test(line)) fenced = !fenced;
    if (!fenced && line.trim() === '') {
      if (current.length) out.push(current);
      current = [];
    } else current.push(line);
  }
  if (current.length) out.push(current);
  return out;
}

/** The lines from the list's anchor to the end of its block, and the block after it. */
function listLines(list: DocList): [string[], string[]] {
  const lines = fs.readFileSync(path.join(root, list.file), 'utf8').split('\n');
  const start = lines.findIndex(
    (line) => line.startsWith('#') && line.replace(/^#+\s*/, '').startsWith(list.section.replace(/^#+\s*/, '')),
  );
  if (start < 0) throw new Error(`${list.file}: no section ${list.section}`);
  const end = lines.findIndex(
    (line, i) => i > start && /^#{1,3} /.test(line) && line.split(' ')[0]!.length <= list.section.split(' ')[0]!.length,
  );
  const section = blocks(lines.slice(start + 1, end < 0 ? undefined : end));
  const at = section.findIndex((block) => block.some((line) => line.includes(list.anchor)));
  if (at < 0) throw new Error(`${list.file} ${list.section}: no "${list.anchor}"`);
  const block = section[at]!;
  const first = block.findIndex((line) => line.includes(list.anchor));
  const from = [block[first]!.slice(block[first]!.indexOf(list.anchor)), ...block.slice(first + 1)];
  return [from, section[at + 1] ?? []];
}

/** Item → type (search attributes that give one) of a list's lines. */
function items(list: DocList): Map<string, string | undefined> {
  const [from, next] = listLines(list);
  const found = itemsOf(list, from);
  return found.size ? found : itemsOf(list, next);
}

function itemsOf(list: DocList, lines: string[]): Map<string, string | undefined> {
  const found = new Map<string, string | undefined>();
  const add = (name: string, type?: string) => {
    if (ITEM[list.kind].test(name) && !list.except?.includes(name)) found.set(name, type);
  };
  const ticked = (text: string) => [...text.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
  if (!lines.length) return found;
  if (lines[0]!.startsWith('|')) {
    // A table: the first column names the items (several to a cell: `A`, `B`); search attributes give their type next.
    for (const row of lines.slice(lines[0] === lines.find((l) => l.includes(list.anchor)) ? 2 : 0)) {
      const cells = row.split('|').map((cell) => cell.trim());
      for (const name of ticked(cells[1] ?? ''))
        add(name, list.kind === 'search-attributes' ? cells[2]?.replace(/`/g, '') : undefined);
    }
  } else if (lines.every((line) => /^(- |\s)/.test(line))) {
    for (const line of lines) if (line.startsWith('- ')) add(ticked(line)[0] ?? '');
  } else {
    const text = lines.join(' ');
    const pairs = [...text.matchAll(/--name (\S+) --type (\S+?)(?=[\s`]|$)/g)];
    if (pairs.length) for (const [, name, type] of pairs) add(name!, type);
    else for (const token of ticked(text)) add(token);
  }
  return found;
}

describe.each(LISTS)('$file, $section: the $kind', (list) => {
  test('are exactly those of the code', () => {
    const doc = items(list);
    const code = fromCode(list.kind);
    const sorted = (m: Map<string, string | undefined>) => [...m.keys()].sort();
    expect(sorted(doc)).toEqual(sorted(code));
    // Where the list gives types, they are the code's.
    for (const [name, type] of doc) if (type !== undefined) expect(`${name} ${type}`).toBe(`${name} ${code.get(name)}`);
  });
});
