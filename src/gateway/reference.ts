/**
 * The API reference as one self-contained HTML page (`GET /docs`), rendered from the OpenAPI document: no script, no
 * stylesheet or font from elsewhere, so it works offline and under a strict Content-Security-Policy.
 */
interface Operation {
  summary?: string;
  requestBody?: { content?: Record<string, { schema?: unknown }> };
  responses?: Record<string, { description?: string }>;
}

/** Text as HTML: safe in an element and in a quoted attribute. */
export const escapeHtml = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

export function referencePage(doc: {
  info?: { title?: string; description?: string };
  paths?: Record<string, Record<string, Operation>>;
}): string {
  const sections = Object.entries(doc.paths ?? {}).flatMap(([path, methods]) =>
    Object.entries(methods).map(([method, op]) => {
      const schema = op.requestBody?.content?.['application/json']?.schema;
      const responses = Object.entries(op.responses ?? {})
        .map(([status, r]) => `<li><code>${escapeHtml(status)}</code> ${escapeHtml(r.description ?? '')}</li>`)
        .join('');
      return [
        `<section><h2><span class="m">${escapeHtml(method.toUpperCase())}</span> <code>${escapeHtml(path)}</code></h2>`,
        `<p>${escapeHtml(op.summary ?? '')}</p>`,
        schema
          ? `<details><summary>Request body (JSON Schema)</summary><pre>${escapeHtml(JSON.stringify(schema, null, 2))}</pre></details>`
          : '',
        `<ul>${responses}</ul></section>`,
      ].join('');
    }),
  );
  const title = escapeHtml(doc.info?.title ?? 'API');
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${title} API</title>
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
section{border-top:1px solid #ddd;padding:.5rem 0}.m{font-family:monospace;background:#eef;padding:0 .3rem}
pre{background:#f6f6f6;padding:.5rem;overflow:auto;max-height:30rem}</style></head><body>
<h1>${title}</h1><p>${escapeHtml(doc.info?.description ?? '')} Machine-readable: <a href="/v1/openapi.json">/v1/openapi.json</a>.
Every <code>/v1/sessions</code> route takes <code>Authorization: Bearer &lt;key&gt;</code>; errors are
<code>application/problem+json</code>.</p>${sections.join('\n')}</body></html>`;
}
