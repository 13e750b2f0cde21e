import { CheckpointInput, SessionId, StartSessionInput, WorkspaceRuntimeSpec } from '../../src/domain/schemas';

describe('SessionId', () => {
  test.each(['a', 'build-42', 'A.b_c-9', 'x'.repeat(128)])('accepts %s', (id) => {
    expect(SessionId.safeParse(id).success).toBe(true);
  });
  test.each(['', '../x', 'a/b', '.hidden', 'a..b', 'a b', '-x', 'x'.repeat(129), 'ü'])('rejects %j', (id) => {
    expect(SessionId.safeParse(id).success).toBe(false);
  });
});

describe('StartSessionInput', () => {
  test('a workspace spec with command, env and seed files parses', () => {
    const parsed = StartSessionInput.parse({
      sessionId: 's1',
      runtime: { kind: 'workspace', command: ['sh', '-c', 'true'], env: { A: '1' }, files: { 'dir/a.txt': 'x' } },
    });
    expect(parsed.runtime.kind).toBe('workspace');
  });

  test('unknown runtime kinds are refused with the path of the problem', () => {
    const result = StartSessionInput.safeParse({ sessionId: 's1', runtime: { kind: 'vm' } });
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.path).toEqual(['runtime', 'kind']);
  });

  test.each([['/etc/passwd'], ['../up'], ['a//b'], ['a/../../b']])('seed file path %s is refused', (p) => {
    expect(WorkspaceRuntimeSpec.safeParse({ kind: 'workspace', command: ['true'], files: { [p]: 'x' } }).success).toBe(
      false,
    );
  });

  test('an empty command is refused', () => {
    const result = WorkspaceRuntimeSpec.safeParse({ kind: 'workspace', command: [] });
    expect(result.error?.issues[0]?.message).toBe('command must name a program');
  });
});

describe('CheckpointInput', () => {
  test('labels longer than 200 characters or with control characters are refused', () => {
    expect(CheckpointInput.safeParse({ label: 'x'.repeat(201) }).success).toBe(false);
    expect(CheckpointInput.safeParse({ label: 'line\nbreak' }).success).toBe(false);
    expect(CheckpointInput.safeParse({ label: 'before refactor ✓' }).success).toBe(true);
  });
});
