// Test-only probe extension for tests/editors/test_vscode.py.
//
// Runs inside code-server's extension host next to the real vramlens extension and checks it
// through the public VS Code API, the way a user's editor sees it: diagnostics, hovers, code
// actions. Steps are driven by a JSON config whose path is in VRAMLENS_PROBE_CONFIG:
//   { file, out, go, fixPattern, timeoutMs }
// 1. open `file`, wait for vramlens diagnostics, collect hovers and code actions -> out (phase "ready")
// 2. put the cursor on the first error so the page shows it; wait until the test creates `go`
//    next to the breakdown chart; wait until the test creates `go` (it takes a screenshot meanwhile)
// 3. apply the first code action whose title matches `fixPattern`, save, wait for the error to
//    clear -> out (phase "done")
// Mode "no-python" (the server cannot start): open `file`, wait, report the (absent) diagnostics.
// Mode "notebook": open `file` as a Jupyter notebook, report the diagnostics of each cell.
// Mode "gpus": open `file`, wait for diagnostics, run "vramlens: Pick GPU" (see pickGpu).
// Mode "python": open `file`, wait for diagnostics, report them, wait for `go` while the page reads the status bar.
const fs = require('fs');
const vscode = require('vscode');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitFor(fn, timeoutMs, stepMs = 100) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value || Date.now() > deadline) {
      return value;
    }
    await sleep(stepMs);
  }
}

function plainDiagnostic(d) {
  return {
    message: d.message,
    source: d.source,
    code: typeof d.code === 'object' && d.code !== null ? String(d.code.value) : d.code,
    severity: ['error', 'warning', 'information', 'hint'][d.severity],
    line: d.range.start.line,
    character: d.range.start.character,
    endLine: d.range.end.line,
    endCharacter: d.range.end.character,
  };
}

function hoverText(hovers) {
  return (hovers || []).map((h) => h.contents.map((c) => (typeof c === 'string' ? c : c.value)).join('\n')).join('\n---\n');
}

function plainAction(a) {
  return { title: a.title, kind: a.kind && a.kind.value, isPreferred: !!a.isPreferred, hasEdit: !!a.edit, command: a.command && a.command.command };
}

// Mode "notebook": open `file` (.ipynb) as a notebook and report each code cell's vramlens diagnostics.
async function runNotebook(config, result) {
  const uri = vscode.Uri.file(config.file);
  const timeoutMs = config.timeoutMs || 60000;
  const vramlens = vscode.extensions.getExtension('vramlens.vramlens');
  result.extensionFound = !!vramlens;
  const notebook = await vscode.workspace.openNotebookDocument(uri);
  const notebookEditor = await vscode.window.showNotebookDocument(notebook);
  result.notebookType = notebook.notebookType;
  const cells = notebook.getCells();
  result.cellLanguages = cells.map((c) => c.document.languageId);
  const ours = (cell) => vscode.languages.getDiagnostics(cell.document.uri).filter((d) => d.source === 'vramlens');
  const any = () => cells.some((c) => ours(c).length > 0);
  await waitFor(any, timeoutMs);
  await sleep(1000); // the rest of the cells' diagnostics arrive together; let them land
  result.extensionActive = !!(vramlens && vramlens.isActive);
  result.cellDiagnostics = cells.map((c, index) => ({ index, diagnostics: ours(c).map(plainDiagnostic) }));
  // Show the first cell with an error, its first error under the cursor, for the screenshot.
  const withError = cells.find((c) => ours(c).some((d) => d.severity === vscode.DiagnosticSeverity.Error));
  if (withError) {
    // A cell far down the notebook has no editor until the notebook editor scrolls to it
    // ("Could NOT open editor for vscode-notebook-cell:…"): reveal the cell first.
    const range = new vscode.NotebookRange(withError.index, withError.index + 1);
    notebookEditor.selections = [range];
    notebookEditor.revealRange(range, vscode.NotebookEditorRevealType.InCenter);
    await sleep(500);
    const editor = await vscode.window.showTextDocument(withError.document);
    const first = ours(withError).find((d) => d.severity === vscode.DiagnosticSeverity.Error);
    editor.selection = new vscode.Selection(first.range.start, first.range.start);
    editor.revealRange(first.range, vscode.TextEditorRevealType.InCenter);
  }
  result.phase = 'done';
}

async function run(config, result, write) {
  if (config.mode === 'notebook') {
    return runNotebook(config, result);
  }
  const uri = vscode.Uri.file(config.file);
  const timeoutMs = config.timeoutMs || 60000;
  const vramlens = vscode.extensions.getExtension('vramlens.vramlens');
  result.extensionFound = !!vramlens;

  const doc = await vscode.workspace.openTextDocument(uri);
  const editor = await vscode.window.showTextDocument(doc, { preview: false });
  result.languageId = doc.languageId;
  const ours = () => vscode.languages.getDiagnostics(uri).filter((d) => d.source === 'vramlens');
  const errors = () => ours().filter((d) => d.severity === vscode.DiagnosticSeverity.Error);

  if (config.mode === 'no-python') {
    // The server cannot start: give it time to (not) publish anything, then report.
    await sleep(8000);
    result.extensionActive = !!(vramlens && vramlens.isActive);
    result.diagnostics = ours().map(plainDiagnostic);
    result.phase = 'done';
    return;
  }
  const diagnostics = await waitFor(() => (ours().length ? ours() : null), timeoutMs);
  result.extensionActive = !!(vramlens && vramlens.isActive);
  result.diagnosticsAfterMs = Date.now() - result.startedAt;
  result.diagnostics = (diagnostics || []).map(plainDiagnostic);
  if (config.mode === 'gpus') {
    await pickGpu(config, result, write, uri, errors, timeoutMs);
    return;
  }
  if (config.mode === 'python') {
    // The page reads the status bar item (its tooltip names the server's interpreter) meanwhile.
    result.phase = 'ready';
    write();
    await waitFor(() => fs.existsSync(config.go), timeoutMs);
    result.phase = 'done';
    return;
  }
  const first = errors()[0] || (diagnostics || [])[0];

  // Hovers: on the first error's start, and on every line the test asked about.
  result.hovers = {};
  const hoverAt = async (pos) => hoverText(await vscode.commands.executeCommand('vscode.executeHoverProvider', uri, pos));
  if (first) {
    result.hovers.diagnostic = await hoverAt(first.range.start);
  }
  for (const [name, line] of Object.entries(config.hoverLines || {})) {
    const text = doc.lineAt(line).text;
    result.hovers[name] = await hoverAt(new vscode.Position(line, text.length - text.trimStart().length));
  }

  // Code actions offered for the error (quick fixes) and for the whole file (source actions).
  const range = first ? first.range : new vscode.Range(0, 0, 0, 0);
  const quickFixes = (await vscode.commands.executeCommand('vscode.executeCodeActionProvider', uri, range, vscode.CodeActionKind.QuickFix.value)) || [];
  const sourceActions = (await vscode.commands.executeCommand('vscode.executeCodeActionProvider', uri, range, vscode.CodeActionKind.Source.value)) || [];
  result.quickFixes = quickFixes.map(plainAction);
  result.sourceActions = sourceActions.map(plainAction);

  // The breakdown chart beside the editor (the page checks it rendered), then the error line
  // in the middle of the editor for the screenshot.
  await vscode.commands.executeCommand('vramlens.showBreakdown');
  await vscode.window.showTextDocument(doc, { viewColumn: editor.viewColumn, preserveFocus: false });
  if (first) {
    editor.selection = new vscode.Selection(first.range.start, first.range.start);
    editor.revealRange(first.range, vscode.TextEditorRevealType.InCenter);
  }
  result.phase = 'ready';
  write();
  await waitFor(() => fs.existsSync(config.go), timeoutMs);

  // Apply the chosen fix like the lightbulb would: its edit, then its command.
  const pattern = new RegExp(config.fixPattern || '.');
  const fix = [...quickFixes, ...sourceActions].find((a) => pattern.test(a.title));
  result.applied = fix ? fix.title : null;
  if (fix) {
    if (fix.edit) {
      result.editApplied = await vscode.workspace.applyEdit(fix.edit);
    }
    if (fix.command) {
      await vscode.commands.executeCommand(fix.command.command, ...(fix.command.arguments || []));
    }
    result.saved = await doc.save();
    result.errorsClearedAfterFix = !!(await waitFor(() => errors().length === 0, 20000));
    await sleep(500); // a late publish for an older version would show up here
    result.diagnosticsAfterFix = ours().map(plainDiagnostic);
    result.textAfterFix = doc.getText();
  }
  result.phase = 'done';
}

// Mode "gpus": run "vramlens: Pick GPU" for the open config; the page reads the list and picks the first
// entry (Enter); then report the vramlens.gpu setting and the diagnostics under the picked GPU.
async function pickGpu(config, result, write, uri, errors, timeoutMs) {
  // The server's own ranking for this document (the client registers the server's commands).
  result.listGpus = await vscode.commands.executeCommand('vramlens.listGpus', uri.toString());
  const picking = vscode.commands.executeCommand('vramlens.pickGpu');
  result.phase = 'picker';
  write();
  await picking;
  result.gpuSetting = vscode.workspace.getConfiguration('vramlens', uri).get('gpu');
  result.errorsClearedAfterPick = !!(await waitFor(() => errors().length === 0, 20000));
  result.diagnosticsAfterPick = vscode.languages.getDiagnostics(uri).filter((d) => d.source === 'vramlens').map(plainDiagnostic);
  result.phase = 'done';
}

async function activate() {
  const configPath = process.env.VRAMLENS_PROBE_CONFIG;
  if (!configPath) {
    return; // installed somewhere else: do nothing
  }
  const config = JSON.parse(fs.readFileSync(configPath, 'utf8'));
  const result = { startedAt: Date.now(), phase: 'started' };
  const write = () => fs.writeFileSync(config.out + '.tmp', JSON.stringify(result, null, 2)) || fs.renameSync(config.out + '.tmp', config.out);
  try {
    await run(config, result, write);
  } catch (e) {
    result.error = String((e && e.stack) || e);
    result.phase = 'done';
  }
  write();
}

module.exports = { activate, deactivate() {} };
