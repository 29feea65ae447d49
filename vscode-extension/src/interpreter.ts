// Which Python runs the vramlens server (and, unless `vramlens.trace.python` names another one, its exact
// traces): chosen the way the Python tool extensions choose theirs. No `vscode` import here, so the
// order is unit-tested with node:test (test/interpreter.test.ts); src/python.ts feeds it from VS Code.
//
// Order, first that applies:
//   1. the `vramlens.interpreter` setting: an executable and its arguments, an array of strings as in
//      ruff's and the Python tool extensions' `interpreter` setting (a plain string is read as one
//      executable); `~`, `${userHome}`, `${workspaceFolder}` and `${env:NAME}` are expanded;
//   2. the interpreter selected in the Python extension (ms-python.python), when it is installed, through its
//      API `environments.getActiveEnvironmentPath` + `resolveEnvironment` (the order and the API of
//      microsoft/vscode-python-tools-extension-template, src/common/settings.ts and src/common/python.ts:
//      the `interpreter` setting when not empty, else the Python extension's active environment);
//   3. the workspace folder's own `.venv` (`.venv/bin/python`, `.venv\Scripts\python.exe` on Windows);
//   4. `python3` (`python` on Windows) from PATH.
// In an untrusted workspace everything that could come from the workspace is left out: only the user-level
// value of the setting counts, and only if it does not point into the workspace (`${workspaceFolder}`, a
// relative path); the Python extension's choice and the `.venv` are not used (either may be the
// workspace's own interpreter): starting an interpreter from the workspace runs the workspace's code.
import * as path from 'path';

export type Source = 'vramlens.interpreter' | 'Python extension' | 'workspace .venv' | 'PATH';

export interface Interpreter {
  /** Executable followed by any extra arguments, e.g. ["/usr/bin/python3"] or ["conda", "run", "-n", "ml", "python"]. */
  command: string[];
  /** Where the choice came from (the status item and the logs say it). */
  source: Source;
}

export interface Inputs {
  trusted: boolean;
  /** `vramlens.interpreter` as the user wrote it (in an untrusted workspace: the user-level value only). */
  setting: unknown;
  /** The Python extension's active interpreter; undefined when it is not installed or has none. */
  pythonExtension: () => Promise<string[] | undefined>;
  /** The workspace folder of the document (or the first one); undefined without a folder. */
  workspaceFolder: string | undefined;
  exists: (file: string) => boolean;
  platform: string;
  env: Record<string, string | undefined>;
  home: string;
}

export interface Resolution {
  interpreter: Interpreter;
  /** Choices that were passed over, and why (for the logs). */
  notes: string[];
}

export function defaultPython(platform: string): string {
  return platform === 'win32' ? 'python' : 'python3';
}

export function workspaceVenvPython(folder: string, platform: string): string {
  return platform === 'win32'
    ? path.win32.join(folder, '.venv', 'Scripts', 'python.exe')
    : path.posix.join(folder, '.venv', 'bin', 'python');
}

/** The setting's value as a command (empty: not set); throws with a readable reason when it cannot be used. */
export function settingCommand(value: unknown, inputs: Pick<Inputs, 'trusted' | 'workspaceFolder' | 'env' | 'home' | 'platform'>): string[] {
  let items: unknown[];
  if (value === undefined || value === null || value === '') {
    return [];
  } else if (typeof value === 'string') {
    items = [value];
  } else if (Array.isArray(value)) {
    items = value;
  } else {
    throw new Error(`"vramlens.interpreter" must be an array of strings, e.g. ["/path/to/venv/bin/python"]; got ${JSON.stringify(value)}`);
  }
  if (items.some((item) => typeof item !== 'string')) {
    throw new Error(`"vramlens.interpreter" must be an array of strings; got ${JSON.stringify(value)}`);
  }
  const words = (items as string[]).map((w) => w.trim()).filter((w) => w !== '');
  if (words.length === 0) {
    return [];
  }
  const pathApi = inputs.platform === 'win32' ? path.win32 : path.posix;
  let intoWorkspace = false;
  const expanded = words.map((word, i) => {
    let w = word.replace(/\$\{(workspaceFolder|userHome|env:([A-Za-z_][A-Za-z0-9_]*))\}/g, (_m, name: string, env?: string) => {
      if (name === 'workspaceFolder') {
        intoWorkspace = true;
        if (!inputs.workspaceFolder) {
          throw new Error(`"vramlens.interpreter" uses \${workspaceFolder}, but no folder is open`);
        }
        return inputs.workspaceFolder;
      }
      return name === 'userHome' ? inputs.home : (inputs.env[env!] ?? '');
    });
    if (w === '~' || w.startsWith('~/') || w.startsWith('~\\')) {
      w = inputs.home + w.slice(1);
    }
    // The executable given as a relative path (`.venv/bin/python`) is the workspace folder's.
    if (i === 0 && !pathApi.isAbsolute(w) && /[\\/]/.test(w)) {
      intoWorkspace = true;
      if (!inputs.workspaceFolder) {
        throw new Error(`"vramlens.interpreter" is a relative path (${word}), but no folder is open`);
      }
      w = pathApi.join(inputs.workspaceFolder, w);
    }
    return w;
  });
  if (intoWorkspace && !inputs.trusted) {
    throw new Error(`"vramlens.interpreter" (${words.join(' ')}) points into the workspace, which is not trusted`);
  }
  return expanded;
}

export async function resolveInterpreter(inputs: Inputs): Promise<Resolution> {
  const notes: string[] = [];
  try {
    const command = settingCommand(inputs.setting, inputs);
    if (command.length > 0) {
      return { interpreter: { command, source: 'vramlens.interpreter' }, notes };
    }
  } catch (e) {
    notes.push(`ignored: ${(e as Error).message}`);
  }
  if (!inputs.trusted) {
    notes.push('untrusted workspace: the Python extension\'s interpreter and the workspace\'s .venv are not used');
  } else {
    try {
      const fromExtension = await inputs.pythonExtension();
      if (fromExtension && fromExtension.length > 0) {
        return { interpreter: { command: fromExtension, source: 'Python extension' }, notes };
      }
    } catch (e) {
      notes.push(`could not ask the Python extension for its interpreter: ${(e as Error).message ?? e}`);
    }
    if (inputs.workspaceFolder) {
      const venv = workspaceVenvPython(inputs.workspaceFolder, inputs.platform);
      if (inputs.exists(venv)) {
        return { interpreter: { command: [venv], source: 'workspace .venv' }, notes };
      }
    }
  }
  return { interpreter: { command: [defaultPython(inputs.platform)], source: 'PATH' }, notes };
}

/** How the status item and the messages name an interpreter's origin. */
export function describeSource(source: Source): string {
  switch (source) {
    case 'vramlens.interpreter':
      return 'the vramlens.interpreter setting';
    case 'Python extension':
      return 'the Python extension\'s selected interpreter';
    case 'workspace .venv':
      return 'the workspace\'s .venv';
    default:
      return 'PATH';
  }
}
