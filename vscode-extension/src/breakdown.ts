// "vramlens: Show memory breakdown": a webview with one stacked bar per estimate (the peak split
// into weights, gradients, optimizer state, activations, ...) against the GPU's usable memory.
// It follows the active editor and redraws on every `vramlens/estimate` notification.
// No external resources: the script and stylesheet ship in media/, the CSP allows nothing else.
import { randomBytes } from 'crypto';
import * as vscode from 'vscode';
import { Estimate, gpuLabel, statusDetail, statusText } from './estimate';

export class BreakdownPanel implements vscode.Disposable {
  static readonly viewType = 'vramlens.breakdown';
  private panel: vscode.WebviewPanel | undefined;
  /** The estimate on display and the document it belongs to. */
  private current: Estimate | undefined;
  private shownUri: string | undefined;

  constructor(private readonly extensionUri: vscode.Uri) {}

  get visible(): boolean {
    return this.panel !== undefined;
  }

  /** Open the panel (or bring it forward) showing `estimate`, or a hint when there is none yet. */
  show(estimate: Estimate | undefined): void {
    if (!this.panel) {
      const media = vscode.Uri.joinPath(this.extensionUri, 'media');
      this.panel = vscode.window.createWebviewPanel(
        BreakdownPanel.viewType,
        'vramlens: memory breakdown',
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
        { enableScripts: true, localResourceRoots: [media], retainContextWhenHidden: false },
      );
      this.panel.webview.html = this.html(this.panel.webview, media);
      this.panel.onDidDispose(() => {
        this.panel = undefined;
        this.shownUri = undefined;
      });
      // The page asks for its data once its script has loaded (also after being hidden and shown).
      this.panel.webview.onDidReceiveMessage((msg: { type?: string }) => {
        if (msg?.type === 'ready') {
          this.post(this.current);
        }
      });
    } else {
      this.panel.reveal(undefined, true);
    }
    this.current = estimate;
    this.post(estimate);
  }

  /** New estimate for `uri`: redraw if that document is the one on display (or nothing is). */
  update(estimate: Estimate, activeUri: string | undefined): void {
    if (!this.panel) {
      return;
    }
    if (estimate.uri === activeUri || estimate.uri === this.shownUri || this.shownUri === undefined) {
      this.current = estimate;
      this.post(estimate);
    }
  }

  /** The document on display has no estimate any more: show none rather than an outdated one. */
  clear(uri: string): void {
    if (this.panel && this.shownUri === uri) {
      this.current = undefined;
      this.post(undefined);
    }
  }

  private post(estimate: Estimate | undefined): void {
    if (!this.panel) {
      return;
    }
    this.shownUri = estimate?.uri;
    const file = estimate ? vscode.Uri.parse(estimate.uri).path.split('/').pop() : undefined;
    void this.panel.webview.postMessage({
      type: 'estimate',
      estimate: estimate ?? null,
      file: file ?? null,
      title: estimate ? statusText(estimate) : null,
      detail: estimate ? statusDetail(estimate) : null,
      gpu: estimate ? gpuLabel(estimate) : null,
    });
  }

  private html(webview: vscode.Webview, media: vscode.Uri): string {
    const nonce = randomBytes(16).toString('base64');
    const script = webview.asWebviewUri(vscode.Uri.joinPath(media, 'breakdown.js'));
    const style = webview.asWebviewUri(vscode.Uri.joinPath(media, 'breakdown.css'));
    const csp = [
      "default-src 'none'",
      `style-src ${webview.cspSource}`,
      `script-src 'nonce-${nonce}'`,
    ].join('; ');
    return `<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="UTF-8">
  <meta http-equiv="Content-Security-Policy" content="${csp}">
  <meta name="viewport" content="width=device-width, initial-scale=1.0">
  <link rel="stylesheet" href="${style}">
  <title>vramlens: memory breakdown</title>
</head>
<body>
  <main>
    <h1 id="file">No estimate yet</h1>
    <p id="title" class="title"></p>
    <p id="detail" class="detail">Open a training config (YAML, JSON, Python or shell launch script).</p>
    <div id="chart" class="chart" role="img" aria-label="Memory breakdown"></div>
    <table id="table" class="table"></table>
  </main>
  <script nonce="${nonce}" src="${script}"></script>
</body>
</html>`;
  }

  dispose(): void {
    this.panel?.dispose();
  }
}
