// Unit tests of the interpreter order (src/interpreter.ts); run with `npm test` (scripts/test.mjs).
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { Inputs, resolveInterpreter, settingCommand, workspaceVenvPython } from '../src/interpreter';

const FOLDER = '/home/me/project';
const VENV = '/home/me/project/.venv/bin/python';

function inputs(over: Partial<Inputs> = {}): Inputs & { asked: number } {
  const out = {
    trusted: true,
    setting: [],
    workspaceFolder: FOLDER,
    exists: (file: string) => file === VENV,
    platform: 'linux',
    env: { TRAIN_ENV: '/opt/envs/train' },
    home: '/home/me',
    asked: 0,
    ...over,
  } as Inputs & { asked: number };
  const fromExtension = over.pythonExtension ?? (async () => ['/home/me/miniconda3/envs/ml/bin/python']);
  out.pythonExtension = () => {
    out.asked += 1;
    return fromExtension();
  };
  return out;
}

test('the setting comes first, as an executable and its arguments', async () => {
  const r = await resolveInterpreter(inputs({ setting: ['conda', 'run', '-n', 'train', 'python'] }));
  assert.deepEqual(r.interpreter, { command: ['conda', 'run', '-n', 'train', 'python'], source: 'vramlens.interpreter' });
  const legacy = await resolveInterpreter(inputs({ setting: '/usr/bin/python3.12' }));     // a plain string: one executable
  assert.deepEqual(legacy.interpreter.command, ['/usr/bin/python3.12']);
});

test('variables and ~ are expanded; a relative executable is the workspace folder\'s', () => {
  const given = inputs();
  assert.deepEqual(settingCommand(['~/envs/a/bin/python'], given), ['/home/me/envs/a/bin/python']);
  assert.deepEqual(settingCommand(['${userHome}/b/python', '-X', 'utf8'], given), ['/home/me/b/python', '-X', 'utf8']);
  assert.deepEqual(settingCommand(['${env:TRAIN_ENV}/bin/python'], given), ['/opt/envs/train/bin/python']);
  assert.deepEqual(settingCommand(['${workspaceFolder}/.venv/bin/python'], given), [VENV]);
  assert.deepEqual(settingCommand(['.venv/bin/python'], given), [VENV]);
  assert.deepEqual(settingCommand(['python3.12'], given), ['python3.12']);                // a command name: PATH
  assert.deepEqual(settingCommand(['  ', ''], given), []);                                // blank: not set
});

test('an empty setting falls to the Python extension, then the workspace .venv, then python3', async () => {
  assert.deepEqual((await resolveInterpreter(inputs())).interpreter,
    { command: ['/home/me/miniconda3/envs/ml/bin/python'], source: 'Python extension' });
  const noExtension = async () => undefined;
  assert.deepEqual((await resolveInterpreter(inputs({ pythonExtension: noExtension }))).interpreter,
    { command: [VENV], source: 'workspace .venv' });
  assert.deepEqual((await resolveInterpreter(inputs({ pythonExtension: noExtension, exists: () => false }))).interpreter,
    { command: ['python3'], source: 'PATH' });
  assert.deepEqual((await resolveInterpreter(inputs({ pythonExtension: noExtension, workspaceFolder: undefined }))).interpreter,
    { command: ['python3'], source: 'PATH' });
});

test('a failing Python extension is passed over with a note', async () => {
  const r = await resolveInterpreter(inputs({ pythonExtension: async () => { throw new Error('not ready'); } }));
  assert.deepEqual(r.interpreter, { command: [VENV], source: 'workspace .venv' });
  assert.match(r.notes.join('\n'), /not ready/);
});

test('an untrusted workspace uses neither the Python extension, nor .venv, nor a setting pointing into it', async () => {
  for (const setting of [[], ['${workspaceFolder}/.venv/bin/python'], ['.venv/bin/python'], ['tools/py']]) {
    const given = inputs({ trusted: false, setting });
    const r = await resolveInterpreter(given);
    assert.deepEqual(r.interpreter, { command: ['python3'], source: 'PATH' }, JSON.stringify(setting));
    assert.equal(given.asked, 0, 'the Python extension was asked in an untrusted workspace');
    if (setting.length > 0) {
      assert.match(r.notes.join('\n'), /points into the workspace/);
    }
  }
  const own = await resolveInterpreter(inputs({ trusted: false, setting: ['~/envs/train/bin/python'] }));
  assert.deepEqual(own.interpreter, { command: ['/home/me/envs/train/bin/python'], source: 'vramlens.interpreter' });
});

test('a setting of the wrong type is ignored with a note', async () => {
  for (const setting of [42, { path: '/usr/bin/python3' }, ['/usr/bin/python3', 3]]) {
    const r = await resolveInterpreter(inputs({ setting }));
    assert.equal(r.interpreter.source, 'Python extension');
    assert.match(r.notes.join('\n'), /array of strings/);
  }
});

test('Windows names', async () => {
  assert.equal(workspaceVenvPython('C:\\work\\p', 'win32'), 'C:\\work\\p\\.venv\\Scripts\\python.exe');
  const r = await resolveInterpreter(inputs({ platform: 'win32', pythonExtension: async () => undefined, exists: () => false }));
  assert.deepEqual(r.interpreter.command, ['python']);
});
