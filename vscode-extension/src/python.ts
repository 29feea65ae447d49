// The Python that runs the vramlens server: chosen by ./interpreter.ts from VS Code's settings, workspace trust
// and the Python extension, then started once to check that it can run the bundled server.
import { execFile } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as vscode from 'vscode';
import { Interpreter, Resolution, resolveInterpreter } from './interpreter';

export const MIN_PYTHON: [number, number] = [3, 10];

export interface PythonCheck {
  major: number;
  minor: number;
  micro: number;
  /** sys.executable: the interpreter itself, also when the command was a launcher (`py -3.12`, `conda run`). */
  executable: string;
  /** Why the bundled server cannot be imported by this interpreter; undefined when it can. */
  importError?: string;
}

/** The subset of the Python extension's API (ms-python.python, `@vscode/python-extension`) used here. */
interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath(resource?: vscode.Uri): { path: string } | undefined;
    resolveEnvironment(env: { path: string } | string): Promise<{ executable?: { uri?: vscode.Uri } } | undefined>;
    onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
  };
  settings?: {
    getExecutionDetails(resource?: vscode.Uri): { execCommand?: string[] };
  };
}

async function fromPythonExtension(resource?: vscode.Uri): Promise<string[] | undefined> {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>('ms-python.python');
  if (!ext) {
    return undefined;
  }
  const api = ext.isActive ? ext.exports : await ext.activate();
  if (api?.environments) {
    const active = api.environments.getActiveEnvironmentPath(resource);
    if (active) {
      const env = await api.environments.resolveEnvironment(active);
      const exe = env?.executable?.uri?.fsPath;
      if (exe) {
        return [exe];
      }
    }
  }
  const cmd = api?.settings?.getExecutionDetails(resource)?.execCommand;
  return cmd && cmd.length > 0 ? cmd : undefined;
}

/** Subscribe to interpreter changes in the Python extension, if it is installed and active. */
export function onPythonInterpreterChanged(listener: () => void): vscode.Disposable | undefined {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>('ms-python.python');
  const event = ext?.isActive ? ext.exports?.environments?.onDidChangeActiveEnvironmentPath : undefined;
  return event ? event(listener) : undefined;
}

/** The interpreter for a document (or the workspace), in the order of ./interpreter.ts. */
export function chooseInterpreter(resource: vscode.Uri | undefined): Promise<Resolution> {
  const trusted = vscode.workspace.isTrusted;
  const config = vscode.workspace.getConfiguration('vramlens', resource);
  // Untrusted: the user's own value only, never one a workspace's .vscode/settings.json wrote (VS Code also
  // ignores workspace values of the restricted setting then: package.json, capabilities.untrustedWorkspaces).
  const setting = trusted ? config.get<unknown>('interpreter') : config.inspect<unknown>('interpreter')?.globalValue;
  const folder = (resource && vscode.workspace.getWorkspaceFolder(resource)) ?? vscode.workspace.workspaceFolders?.[0];
  return resolveInterpreter({
    trusted,
    setting,
    pythonExtension: () => fromPythonExtension(resource),
    workspaceFolder: folder?.uri.scheme === 'file' ? folder.uri.fsPath : undefined,
    exists: (file) => fs.existsSync(file),
    platform: process.platform,
    env: process.env,
    home: os.homedir(),
  });
}

// Run with the server's own environment: its version, its executable, and whether it imports the bundled
// server (the compiled pydantic_core must exist for its version). Python 2 and old 3.x must be able to parse
// it, to say their version.
const CHECK_SCRIPT = [
  'import sys, json',
  'out = {"version": list(sys.version_info[:3]), "executable": sys.executable}',
  'if sys.version_info >= (3, 10):',
  '    try:',
  '        import vramlens, pydantic_core, yaml, pygls',
  '    except Exception as e:',
  '        out["importError"] = "%s: %s" % (type(e).__name__, e)',
  'print(json.dumps(out))',
].join('\n');

/** Start the interpreter once; throws with a readable reason when it does not run at all. */
export function checkInterpreter(interpreter: Interpreter, cwd: string, env: NodeJS.ProcessEnv): Promise<PythonCheck> {
  const [exe, ...args] = interpreter.command;
  return new Promise((resolve, reject) => {
    execFile(exe, [...args, '-c', CHECK_SCRIPT], { cwd, env, timeout: 30000 }, (error, stdout, stderr) => {
      if (error) {
        const reason = (error as NodeJS.ErrnoException).code === 'ENOENT'
          ? `"${exe}" was not found`
          : `"${interpreter.command.join(' ')}" failed: ${stderr.trim() || error.message}`;
        reject(new Error(reason));
        return;
      }
      try {
        const out = JSON.parse(stdout.trim().split('\n').pop() ?? '') as {
          version: [number, number, number]; executable: string; importError?: string;
        };
        const [major, minor, micro] = out.version;
        resolve({ major, minor, micro, executable: out.executable, importError: out.importError });
      } catch {
        reject(new Error(`"${interpreter.command.join(' ')}" printed an unexpected answer: ${stdout.trim().slice(0, 300)}`));
      }
    });
  });
}

export function isSupported(v: PythonCheck): boolean {
  return v.major > MIN_PYTHON[0] || (v.major === MIN_PYTHON[0] && v.minor >= MIN_PYTHON[1]);
}
