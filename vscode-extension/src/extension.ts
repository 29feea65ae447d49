// vramlens for VS Code: starts the bundled Python language server (`python -m vramlens serve`)
// and adds what LSP alone does not give: the predicted peak in the status bar and a language status item,
// a GPU picker, a breakdown chart, exact-trace / live-probe commands with progress and cancel.
import * as path from 'path';
import * as vscode from 'vscode';
import {
  CancellationToken,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  ServerOptions,
  State,
} from 'vscode-languageclient/node';
import { BreakdownPanel } from './breakdown';
import { GpuEntry, gpuItems } from './gpus';
import {
  ESTIMATE_NOTIFICATION, Estimate, isEstimate, isNoEstimate, statusBarText, statusDetail, statusText,
} from './estimate';
import { describeSource, Interpreter } from './interpreter';
import { checkInterpreter, chooseInterpreter, isSupported, MIN_PYTHON, onPythonInterpreterChanged, PythonCheck } from './python';

/**
 * Languages the server analyses: training configs, Python training scripts, launch scripts, and
 * launch commands in Markdown code blocks (READMEs); and the Python cells of Jupyter notebooks, which
 * the client syncs as notebooks (the server announces `notebookDocumentSync`) and which get their
 * diagnostics on each cell.
 */
const LANGUAGES = ['yaml', 'json', 'python', 'shellscript', 'markdown'];
const NOTEBOOK_CELL_SCHEME = 'vscode-notebook-cell';
const DOCUMENT_SELECTOR = [
  ...LANGUAGES.flatMap((language) => [
    { scheme: 'file', language },
    { scheme: 'untitled', language },
  ]),
  { scheme: NOTEBOOK_CELL_SCHEME, language: 'python' },
];

/** Settings whose change needs a new server process (the rest reach it via didChangeConfiguration). */
const RESTART_SETTINGS = ['vramlens.interpreter'];

const HOW_TO_CHOOSE = 'Select your training environment\'s interpreter in the Python extension, or set '
  + '"vramlens.interpreter" to it, e.g. ["/path/to/venv/bin/python"].';

/** The server's environment: the bundled server and its dependencies first on sys.path. The interpreter's own
 *  site-packages, the user's included, stay visible after them: the server looks up installed packages
 *  (bitsandbytes, the frameworks' versions) where `python -m vramlens` run by that interpreter finds them. */
function serverEnvironment(bundled: string): NodeJS.ProcessEnv {
  return {
    ...process.env,
    PYTHONPATH: path.join(bundled, 'libs'),
    PYTHONSAFEPATH: '1',
    PYTHONUNBUFFERED: '1',
  };
}

class Extension implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private starting: Promise<void> | undefined;
  private readonly estimates = new Map<string, Estimate>();
  /** Why a document has no estimate, from the server's last notification for it. */
  private readonly noEstimate = new Map<string, string>();
  private readonly status: vscode.LanguageStatusItem;
  /** Which Python runs the server (and the exact traces), in the same `{}` popup. */
  private readonly pythonStatus: vscode.LanguageStatusItem;
  /** The interpreter the running server was started with, and what it said about itself. */
  private python: { check: PythonCheck; interpreter: Interpreter } | undefined;
  /** The peak of the active document in the status bar itself (the language status item sits in the `{}` popup). */
  private readonly peakItem: vscode.StatusBarItem;
  private readonly breakdown: BreakdownPanel;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(private readonly context: vscode.ExtensionContext, private readonly log: vscode.LogOutputChannel) {
    this.status = vscode.languages.createLanguageStatusItem('vramlens.status', DOCUMENT_SELECTOR);
    this.status.name = 'vramlens';
    this.status.text = 'vramlens';
    this.status.command = { title: 'Show logs', command: 'vramlens.showLogs' };
    this.pythonStatus = vscode.languages.createLanguageStatusItem('vramlens.python', DOCUMENT_SELECTOR);
    this.pythonStatus.name = 'vramlens Python';
    this.pythonStatus.text = 'vramlens: Python';
    this.pythonStatus.command = { title: 'Change', command: 'workbench.action.openSettings', arguments: ['vramlens.interpreter'] };
    this.peakItem = vscode.window.createStatusBarItem('vramlens.peak', vscode.StatusBarAlignment.Right, 100);
    this.peakItem.name = 'vramlens peak';
    this.peakItem.command = 'vramlens.showBreakdown';
    this.breakdown = new BreakdownPanel(context.extensionUri);
    this.disposables.push(this.status, this.pythonStatus, this.peakItem, this.breakdown);
  }

  // ---- server lifecycle ---------------------------------------------------------------------

  /** (Re)start the server; concurrent calls wait for the same start. */
  restart(): Promise<void> {
    const previous = this.starting ?? Promise.resolve();
    const next: Promise<void> = previous.catch(() => undefined).then(() => this.doRestart()).finally(() => {
      if (this.starting === next) {
        this.starting = undefined;
      }
    });
    this.starting = next;
    return next;
  }

  private async doRestart(): Promise<void> {
    await this.stop();
    this.setStatus('vramlens: starting', 'Starting the vramlens server', vscode.LanguageStatusSeverity.Information, true);

    const resource = vscode.window.activeTextEditor?.document.uri ?? vscode.workspace.workspaceFolders?.[0]?.uri;
    const bundled = this.context.asAbsolutePath('bundled');
    const env = serverEnvironment(bundled);
    const { interpreter, notes } = await chooseInterpreter(resource);
    for (const note of notes) {
      this.log.info(`Interpreter: ${note}`);
    }
    const named = `"${interpreter.command.join(' ')}" (from ${describeSource(interpreter.source)})`;
    let python: PythonCheck;
    try {
      python = await checkInterpreter(interpreter, bundled, env);
    } catch (e) {
      return this.fail(
        `vramlens needs Python ${MIN_PYTHON.join('.')} or newer, but ${(e as Error).message} `
        + `(from ${describeSource(interpreter.source)}). ${HOW_TO_CHOOSE}`,
        interpreter,
      );
    }
    const version = `${python.major}.${python.minor}.${python.micro}`;
    if (!isSupported(python)) {
      return this.fail(
        `vramlens needs Python ${MIN_PYTHON.join('.')} or newer; ${python.executable} (${named}) is ${version}. `
        + HOW_TO_CHOOSE,
        interpreter,
      );
    }
    if (python.importError) {
      return this.fail(
        `vramlens cannot run its bundled server with Python ${version} at ${python.executable} (${named}): `
        + `${python.importError}. The extension bundles the server for CPython 3.10 to 3.14 on linux-x64. `
        + HOW_TO_CHOOSE,
        interpreter,
      );
    }
    this.python = { check: python, interpreter };
    this.log.info(`Server: Python ${version} at ${python.executable} (from ${describeSource(interpreter.source)})`);
    this.showPython();

    const [command, ...prefixArgs] = interpreter.command;
    const args = [...prefixArgs, '-m', 'vramlens', 'serve', '--stdio'];
    const serverOptions: ServerOptions = {
      command,
      args,
      // Never start in the workspace folder: `python -m` puts the working directory on sys.path, and a
      // workspace must not be able to shadow the server's modules.
      options: { cwd: bundled, env },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: DOCUMENT_SELECTOR,
      synchronize: { configurationSection: 'vramlens' },
      outputChannel: this.log,
      traceOutputChannel: this.log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: { trusted: vscode.workspace.isTrusted },
    };
    const client = new LanguageClient('vramlens', 'vramlens', serverOptions, clientOptions);
    client.onNotification(ESTIMATE_NOTIFICATION, (params: unknown) => this.onEstimate(params));
    client.onDidChangeState((e) => {
      if (e.newState === State.Stopped && this.client === client) {
        this.setStatus('vramlens: stopped', 'The vramlens server is not running', vscode.LanguageStatusSeverity.Warning);
      }
    });
    this.client = client;
    this.log.info(`Starting server: ${command} ${args.join(' ')} (cwd ${bundled})`);
    try {
      await client.start();
    } catch (e) {
      this.client = undefined;
      return this.fail(`The vramlens server failed to start: ${e instanceof Error ? e.message : e}`);
    }
    this.setStatus('vramlens', 'Waiting for the first estimate', vscode.LanguageStatusSeverity.Information);
    this.refreshStatus();
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.estimates.clear();
    this.noEstimate.clear();
    this.peakItem.hide();
    if (client && client.state !== State.Stopped) {
      try {
        await client.stop(5000);
      } catch (e) {
        this.log.warn(`Stopping the server: ${e}`);
      }
    }
  }

  /** Which Python runs the server and the exact traces, e.g. ["Python 3.12.3 at /home/me/venv/bin/python (from
   *  the Python extension's selected interpreter)", "exact traces: the same"]. The server runs the traces with its
   *  own interpreter unless `vramlens.trace.python` names another (server: lsp/server.py, worker_client). */
  private pythonLines(): string[] {
    if (!this.python) {
      return [];
    }
    const { check, interpreter } = this.python;
    const traces = String(vscode.workspace.getConfiguration('vramlens').get<unknown>('trace.python') ?? '').trim();
    return [
      `Python ${check.major}.${check.minor}.${check.micro} at ${check.executable} (from ${describeSource(interpreter.source)})`,
      `exact traces: ${traces ? `${traces} (vramlens.trace.python)` : 'the same'}`,
    ];
  }

  /** The interpreter in the `{}` popup; refreshed when `vramlens.trace.python` changes. */
  showPython(): void {
    if (!this.python) {
      return;
    }
    const { check } = this.python;
    this.pythonStatus.text = `Python ${check.major}.${check.minor}.${check.micro}`;
    this.pythonStatus.detail = this.pythonLines().join('; ');
    this.pythonStatus.severity = vscode.LanguageStatusSeverity.Information;
    this.refreshStatus();
  }

  private fail(message: string, interpreter?: Interpreter): void {
    this.log.error(message);
    this.python = undefined;
    this.pythonStatus.text = 'vramlens: no Python';
    this.pythonStatus.detail = interpreter ? `"${interpreter.command.join(' ')}" (${describeSource(interpreter.source)})` : '';
    this.pythonStatus.severity = vscode.LanguageStatusSeverity.Error;
    this.setStatus('vramlens: not running', message, vscode.LanguageStatusSeverity.Error);
    void vscode.window.showErrorMessage(message, 'Show logs', 'Open settings').then((choice) => {
      if (choice === 'Show logs') {
        this.log.show();
      } else if (choice === 'Open settings') {
        void vscode.commands.executeCommand('workbench.action.openSettings', 'vramlens.interpreter');
      }
    });
  }

  // ---- estimates: language status item and breakdown --------------------------------------

  private onEstimate(params: unknown): void {
    if (isNoEstimate(params)) {
      this.estimates.delete(params.uri);
      this.noEstimate.set(params.uri, params.reason);
      this.refreshStatus();
      this.breakdown.clear(params.uri);
      return;
    }
    if (!isEstimate(params)) {
      this.log.warn(`Ignoring malformed ${ESTIMATE_NOTIFICATION}: ${JSON.stringify(params)}`);
      return;
    }
    this.estimates.set(params.uri, params);
    this.noEstimate.delete(params.uri);
    this.refreshStatus();
    this.breakdown.update(params, this.activeUri());
  }

  /** The active document's URI; for a notebook cell, its notebook's (a notebook is estimated as a whole). */
  private activeUri(): string | undefined {
    const document = vscode.window.activeTextEditor?.document;
    if (document?.uri.scheme === NOTEBOOK_CELL_SCHEME) {
      const notebook = vscode.workspace.notebookDocuments.find(
        (nb) => nb.getCells().some((cell) => cell.document === document),
      );
      return notebook?.uri.toString();
    }
    return document?.uri.toString();
  }

  private activeEstimate(): Estimate | undefined {
    const uri = this.activeUri();
    return uri ? this.estimates.get(uri) : undefined;
  }

  refreshStatus(): void {
    if (!this.client) {
      return;
    }
    const e = this.activeEstimate();
    if (!e) {
      const uri = this.activeUri();
      const reason = uri ? this.noEstimate.get(uri) : undefined;
      const detail = !reason || reason === 'not a training config'
        ? 'No training settings found in this file' : `No estimate: ${reason}`;
      this.setStatus('vramlens', detail, vscode.LanguageStatusSeverity.Information);
      this.status.command = { title: 'Show logs', command: 'vramlens.showLogs' };
      this.peakItem.hide();
      return;
    }
    this.setStatus(
      statusText(e),
      statusDetail(e),
      e.fits ? vscode.LanguageStatusSeverity.Information : vscode.LanguageStatusSeverity.Error,
    );
    this.status.command = { title: 'Breakdown', command: 'vramlens.showBreakdown' };
    this.peakItem.text = `${e.fits ? '$(check)' : '$(error)'} ${statusBarText(e)}`;
    this.peakItem.tooltip = `vramlens: ${statusDetail(e)} (click for the breakdown)`
      + this.pythonLines().map((line) => `\n${line}`).join('');
    this.peakItem.backgroundColor = e.fits ? undefined : new vscode.ThemeColor('statusBarItem.errorBackground');
    this.peakItem.show();
  }

  private setStatus(text: string, detail: string, severity: vscode.LanguageStatusSeverity, busy = false): void {
    this.status.text = text;
    this.status.detail = detail;
    this.status.severity = severity;
    this.status.busy = busy;
  }

  showBreakdown(): void {
    this.breakdown.show(this.activeEstimate() ?? [...this.estimates.values()].pop());
  }

  onActiveEditorChanged(): void {
    this.refreshStatus();
    const e = this.activeEstimate();
    if (e) {
      this.breakdown.update(e, e.uri);
    }
  }

  // ---- commands that call the server ------------------------------------------------------

  private async runningClient(): Promise<LanguageClient> {
    if (this.starting) {
      await this.starting;
    }
    if (!this.client || !this.client.isRunning()) {
      throw new Error('the vramlens server is not running (see "vramlens: Show logs")');
    }
    return this.client;
  }

  private async executeServerCommand<T>(command: string, args: unknown[], token?: CancellationToken): Promise<T> {
    const client = await this.runningClient();
    return client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args }, token) as Promise<T>;
  }

  /** Pick the GPU to check against; for the active config, each GPU shows that run's peak and tokens/s. */
  async pickGpu(): Promise<void> {
    const resource = vscode.window.activeTextEditor?.document.uri;
    // The server ranks the GPUs for the active document when it is an open config with an estimate.
    const document = resource ? [resource.toString()] : [];
    let gpus: GpuEntry[];
    try {
      gpus = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Window, title: 'vramlens: ranking GPUs' },
        () => this.executeServerCommand<GpuEntry[]>('vramlens.listGpus', document),
      );
    } catch (e) {
      void vscode.window.showErrorMessage(`vramlens: could not list GPUs: ${(e as Error).message}`);
      return;
    }
    const config = vscode.workspace.getConfiguration('vramlens', resource);
    const current = config.get<string>('gpu');
    const items = gpuItems(gpus, current);
    const ranked = items.some((i) => i.kind === vscode.QuickPickItemKind.Separator);
    const choice = await vscode.window.showQuickPick(items, {
      title: ranked
        ? `vramlens: GPU to check ${path.basename(resource!.fsPath)} against (fastest first)`
        : 'vramlens: GPU to check configs against',
      placeHolder: current ? `Current: ${current}` : 'Pick a GPU',
      matchOnDescription: true,
      matchOnDetail: true,
    });
    if (!choice?.gpu) {
      return;
    }
    const target = vscode.workspace.workspaceFolders?.length
      ? vscode.ConfigurationTarget.Workspace
      : vscode.ConfigurationTarget.Global;
    await config.update('gpu', choice.gpu, target);
    if (choice.count !== undefined) {
      await config.update('gpuCount', choice.count, target);
    }
  }

  /** Run the server's exact trace or live probe for the active document, with progress and cancel. */
  async runAnalysis(kind: 'trace' | 'probe'): Promise<void> {
    if (!vscode.workspace.isTrusted) {
      void vscode.window.showWarningMessage('vramlens: exact traces and live probes only run in trusted workspaces.');
      return;
    }
    const editor = vscode.window.activeTextEditor;
    if (!editor) {
      void vscode.window.showInformationMessage('vramlens: open a training config first.');
      return;
    }
    const uri = editor.document.uri.toString();
    const command = kind === 'trace' ? 'vramlens.runTrace' : 'vramlens.runProbe';
    const title = kind === 'trace' ? 'vramlens: exact trace' : 'vramlens: live probe';
    try {
      const summary = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title, cancellable: true },
        (_progress, token) => this.executeServerCommand<unknown>(command, [uri], token),
      );
      this.log.info(`${title} of ${uri}: ${JSON.stringify(summary)}`);
      void vscode.window.showInformationMessage(`${title}: ${describeSummary(summary)}`, 'Show logs').then((c) => {
        if (c) {
          this.log.show();
        }
      });
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e);
      this.log.error(`${title} of ${uri} failed: ${message}`);
      void vscode.window.showErrorMessage(`${title} failed: ${message}`, 'Show logs').then((c) => {
        if (c) {
          this.log.show();
        }
      });
    }
  }

  dispose(): void {
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}

/** One line for a trace/probe result: the server returns a JSON summary object. */
function describeSummary(summary: unknown): string {
  if (summary && typeof summary === 'object') {
    const s = summary as Record<string, unknown>;
    if (typeof s.message === 'string') {
      return s.message;
    }
    const peak = s.peak_gib ?? s.exact_gib ?? s.max_reserved_gib ?? s.max_allocated_gib;
    if (typeof peak === 'number') {
      return `peak ${peak.toFixed(1)} GiB`;
    }
  }
  return 'done (details in the logs)';
}

let extension: Extension | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const log = vscode.window.createOutputChannel('vramlens', { log: true });
  const ext = new Extension(context, log);
  extension = ext;
  context.subscriptions.push(
    log,
    ext,
    vscode.commands.registerCommand('vramlens.showLogs', () => log.show()),
    vscode.commands.registerCommand('vramlens.restart', () => ext.restart()),
    vscode.commands.registerCommand('vramlens.pickGpu', () => ext.pickGpu()),
    vscode.commands.registerCommand('vramlens.showBreakdown', () => ext.showBreakdown()),
    vscode.commands.registerCommand('vramlens.runExactTrace', () => ext.runAnalysis('trace')),
    vscode.commands.registerCommand('vramlens.runLiveProbe', () => ext.runAnalysis('probe')),
    vscode.window.onDidChangeActiveTextEditor(() => ext.onActiveEditorChanged()),
    vscode.workspace.onDidGrantWorkspaceTrust(() => ext.restart()),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (RESTART_SETTINGS.some((s) => e.affectsConfiguration(s))) {
        void ext.restart();
      } else if (e.affectsConfiguration('vramlens.trace.python')) {
        ext.showPython();
      }
    }),
  );
  await ext.restart();
  // Resolving the interpreter activated the Python extension (when installed): follow its choice.
  const pythonChanged = onPythonInterpreterChanged(() => {
    const setting = vscode.workspace.getConfiguration('vramlens').get<unknown>('interpreter');
    if (!setting || (Array.isArray(setting) && setting.length === 0)) {
      void ext.restart();
    }
  });
  if (pythonChanged) {
    context.subscriptions.push(pythonChanged);
  }
}

export async function deactivate(): Promise<void> {
  await extension?.stop();
  extension = undefined;
}
