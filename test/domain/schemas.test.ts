import {
  CheckpointInput,
  MAX_SPEC_BYTES,
  PauseInput,
  ResumeInput,
  SessionId,
  StartSessionInput,
  StopInput,
  WorkspaceRuntimeSpec,
} from '../../src/domain/schemas';

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

describe('strict inputs', () => {
  test.each([
    [ResumeInput, { checkpoint_id: '000001-x' }, 'unknown field "checkpoint_id" (did you mean "checkpointId"?)'],
    [CheckpointInput, { lable: 'x' }, 'unknown field "lable" (did you mean "label"?)'],
    [StopInput, { check_point: false }, 'unknown field "check_point" (did you mean "checkpoint"?)'],
    [PauseInput, { whatever: 1 }, 'unknown field "whatever"'],
    // A schema cut down with omit() keeps its parent's names: the key it dropped is not suggested back.
    [WorkspaceRuntimeSpec.omit({ kind: true }), { command: ['x'], kind: 'workspace' }, 'unknown field "kind"'],
  ])('%#: an unknown key is refused, naming the field it probably meant', (schema, input, message) => {
    expect(schema.safeParse(input).error?.issues).toEqual([
      expect.objectContaining({ code: 'unrecognized_keys', message }),
    ]);
  });

  test('unknown keys are refused at every depth of a start spec', () => {
    const issues = (input: unknown) => StartSessionInput.safeParse(input).error?.issues.map((i) => i.path);
    expect(issues({ sessionId: 's', runtime: { kind: 'memory', initial_state: 'x' } })).toEqual([['runtime']]);
    expect(issues({ sessionId: 's', runtime: { kind: 'memory' }, liveness: { heartbeat: 1 } })).toEqual([['liveness']]);
    expect(issues({ session_id: 's', runtime: { kind: 'memory' } })).toEqual([['sessionId'], []]);
  });
});

describe('what a workspace may be given', () => {
  const workspace = (extra: object) =>
    WorkspaceRuntimeSpec.safeParse({ kind: 'workspace', command: ['true'], ...extra });
  test.each([['.'], ['a/./b'], ['a\0b'], ['x'.repeat(256)], ['ok/' + 'é'.repeat(128)]])(
    'seed path %j is refused',
    (p) => {
      expect(workspace({ files: { [p]: 'x' } }).success).toBe(false);
    },
  );

  test('a seed file that is also a directory of another is refused, naming both', () => {
    expect(workspace({ files: { a: 'x', 'a/b/c': 'y' } }).error?.issues[0]?.message).toBe(
      'seed file "a" is also the directory of "a/b/c"',
    );
    expect(workspace({ files: { a: 'x', ab: 'y', 'b/a': 'z' } }).success).toBe(true);
  });

  test.each(['DS_MASTER_KEYS', 'TEMPORAL_API_KEY', 'DS_'])('env name %s is reserved', (name) => {
    expect(workspace({ env: { [name]: 'x' } }).error?.issues[0]?.message).toBe(
      'env names starting with DS_ or TEMPORAL_ are reserved',
    );
  });

  test('a spec larger than the limit is refused as a whole', () => {
    const env = Object.fromEntries(Array.from({ length: 13 }, (_, i) => [`V${i}`, 'x'.repeat(32_000)]));
    const result = StartSessionInput.safeParse({
      sessionId: 's',
      runtime: { kind: 'workspace', command: ['true'], env },
    });
    expect(result.error?.issues[0]?.message).toBe(`the start spec must be at most ${MAX_SPEC_BYTES} bytes as JSON`);
  });
});

describe('text an operator reads', () => {
  test.each(['\u202e', '\u202a', '\u2066', '\u2069', '\u0000', '\u001b[2J', '\u009b'])(
    '%j is refused in labels and reasons',
    (ch) => {
      expect(CheckpointInput.safeParse({ label: `a${ch}b` }).success).toBe(false);
      expect(PauseInput.safeParse({ reason: `a${ch}b` }).success).toBe(false);
    },
  );

  test('descriptions may span lines, but not carry other control characters', () => {
    const spec = (description: string) =>
      StartSessionInput.safeParse({ sessionId: 's', runtime: { kind: 'memory' }, description });
    expect(spec('first line\n\tsecond').success).toBe(true);
    expect(spec('bell\u0007').success).toBe(false);
  });
});

describe('liveness', () => {
  test('a heartbeat timeout too short for three heartbeats is refused', () => {
    const spec = (heartbeatTimeoutMs: number) =>
      StartSessionInput.safeParse({ sessionId: 's', runtime: { kind: 'memory' }, liveness: { heartbeatTimeoutMs } });
    expect(spec(1_000).error?.issues[0]?.message).toBe(
      'heartbeatTimeoutMs must be at least 3000: three heartbeats must fit in it',
    );
    expect(spec(3_000).success).toBe(true);
  });
});
