/**
 * Characters a terminal acts on instead of showing: C0 and C1 controls and DEL (cursor moves, screen clears, title
 * and clipboard escapes), the bidirectional embeddings, overrides, isolates and marks (which reorder what is read),
 * and the Unicode line and paragraph separators.
 */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

const NAMED: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/**
 * Text from a session (labels, reasons, failure messages, ids from the visibility store) made safe to print: every
 * unsafe character becomes a visible escape (`\x1b`, `\u202e`, `\n`). Backslashes are left as they are, so escaping
 * twice changes nothing; a literal `\x1b` and an escaped ESC look alike, and neither acts.
 */
export function printable(text: string): string {
  return text.replace(UNSAFE, (c) => {
    const code = c.charCodeAt(0);
    return NAMED[c] ?? (code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16)}`);
  });
}

/** Rows of cells in aligned columns (cells made printable first, so escapes count in the widths). */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const cells = [header, ...rows].map((row) => row.map(printable));
  const widths = header.map((_, i) => Math.max(...cells.map((row) => row[i]?.length ?? 0)));
  return cells.map((row) =>
    row
      .map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd(),
  );
}
