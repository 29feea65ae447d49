// Browser side of tests/editors/test_vscode.py: opens code-server in Debian's chromium (driven by
// playwright-core, no browser download), waits for the probe extension to reach its "ready" phase,
// hovers the error squiggle and takes the screenshot, lets the probe apply the fix, and prints
// what the page showed as one JSON line.
// MODE=no-python instead checks the error notification shown when the server cannot start; MODE=notebook waits
// for the probe to read a notebook's cell diagnostics and checks a squiggle shows in a cell; MODE=gpus reads
// the "vramlens: Pick GPU" list for the open config and picks its first entry; MODE=python reads the peak status
// bar item's tooltip.
// Environment: PLAYWRIGHT_CORE (module path), CHROMIUM, URL, MODE, PROBE_OUT, PROBE_GO, SCREENSHOT, TIMEOUT_MS.
const fs = require('fs');
const { chromium } = require(process.env.PLAYWRIGHT_CORE);

const timeoutMs = Number(process.env.TIMEOUT_MS || 90000);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function probePhase() {
  try {
    return JSON.parse(fs.readFileSync(process.env.PROBE_OUT, 'utf8')).phase;
  } catch {
    return undefined;
  }
}

async function waitForPhase(phases, deadline) {
  while (Date.now() < deadline) {
    const phase = probePhase();
    if (phases.includes(phase)) {
      return phase;
    }
    await sleep(200);
  }
  return probePhase();
}

// The breakdown webview lives in nested iframes: find the frame that has the chart.
async function readBreakdown(page) {
  for (const frame of page.frames()) {
    try {
      const segments = await frame.locator('#chart .seg').count();
      if (segments > 0) {
        return {
          segments,
          components: await frame.locator('#chart .seg').evaluateAll((els) => els.map((e) => e.dataset.component)),
          title: await frame.locator('#title').innerText(),
        };
      }
    } catch {
      // detached or cross-origin frame: not ours
    }
  }
  return { segments: 0, frames: page.frames().map((f) => f.url().slice(0, 200)) };
}

// The extension could not start its server: an error notification with a "Show logs" button,
// which opens the vramlens output channel.
async function checkErrorNotification(page, out) {
  let toast = page.locator('.notification-toast', { hasText: 'vramlens' }).first();
  try {
    await toast.waitFor({ state: 'visible', timeout: 90000 });
  } catch {
    // Toasts can be hidden by others: look in the notification centre too.
    await page.keyboard.press('F1');
    await page.keyboard.type('Notifications: Show Notifications');
    await page.keyboard.press('Enter');
    toast = page.locator('.notifications-center .notification-list-item', { hasText: 'vramlens' }).first();
    try {
      await toast.waitFor({ state: 'visible', timeout: 5000 });
    } catch {
      out.notification = null;
      return;
    }
  }
  out.notification = {
    text: await toast.locator('.notification-list-item-message').innerText(),
    buttons: await toast.locator('.monaco-button').allInnerTexts(),
  };
  await toast.locator('.monaco-button', { hasText: 'Show logs' }).click();
  const output = page.locator('.part.panel .monaco-editor .view-lines', { hasText: 'needs Python' });
  try {
    await output.first().waitFor({ state: 'visible', timeout: 15000 });
    out.outputShown = true;
  } catch {
    out.outputShown = false;
  }
}

// The peak in the status bar: its text, and the tooltip a user sees on hovering it (which names the
// interpreter that runs the server).
async function readPeakTooltip(page, out) {
  const peakItem = page.locator('.part.statusbar .statusbar-item', { hasText: /peak .*GiB/ }).first();
  try {
    await peakItem.waitFor({ state: 'visible', timeout: 30000 });
  } catch {
    out.statusBar = null;
    out.statusBarItems = await page.locator('.part.statusbar .statusbar-item').allInnerTexts();
    return;
  }
  out.statusBar = (await peakItem.innerText()).trim();
  const hover = page.locator('.workbench-hover, .monaco-hover:not(.hidden)').first();
  for (let attempt = 0; attempt < 5 && !(out.statusTooltip && out.statusTooltip.includes('Python')); attempt++) {
    const box = await peakItem.boundingBox();
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2, { steps: 5 });
    try {
      await hover.waitFor({ state: 'visible', timeout: 5000 });
      await sleep(300);
      out.statusTooltip = (await hover.innerText()).trim();
    } catch {
      out.statusTooltip = null;
    }
    if (!(out.statusTooltip && out.statusTooltip.includes('Python'))) {
      await page.mouse.move(5, 5);
      await sleep(500);
    }
  }
}

// "vramlens: Pick GPU" is open: read its entries (label, description, detail as the list renders them),
// read them again filtered by "does not fit", then clear the filter and take the first entry with Enter.
async function pickFromGpuList(page, out, deadline) {
  out.probePhase = await waitForPhase(['picker', 'done'], deadline);
  const widget = page.locator('.quick-input-widget');
  const rows = widget.locator('.quick-input-list .monaco-list-row');
  const read = async () => rows.evaluateAll((els) => els.map((e) => ({
    text: e.innerText.replace(/\s+/g, ' ').trim(),
    aria: e.getAttribute('aria-label'),
  })));
  try {
    await rows.first().waitFor({ state: 'visible', timeout: 30000 });
    await sleep(300);
    out.pickerTitle = await widget.locator('.quick-input-title').innerText();
    out.pickerRows = await read();
    await page.screenshot({ path: process.env.SCREENSHOT });
    out.screenshot = process.env.SCREENSHOT;
    const input = widget.locator('.quick-input-box input');
    await input.fill('does not fit');
    await sleep(500);
    out.pickerRowsNotFitting = await read();
    await input.fill('');
    await sleep(500);
    out.pickerRowsAgain = await read();
    await page.keyboard.press('Enter');
  } catch (e) {
    out.console.push(`picker: ${e.message}`);
  }
  out.probePhase = await waitForPhase(['done'], deadline);
}

async function main() {
  const deadline = Date.now() + timeoutMs;
  const out = { workbench: false, squiggle: false, hoverText: null, screenshot: null, console: [] };
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-dev-shm-usage'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1600, height: 900 } });
    page.on('pageerror', (e) => out.console.push(`pageerror: ${e.message}`));
    // The element's box once two readings 400 ms apart agree (at most ~6 s).
    const stableBox = async (locator) => {
      let box = await locator.boundingBox();
      for (let i = 0; i < 15; i++) {
        await sleep(400);
        const next = await locator.boundingBox();
        if (box && next && Math.abs(next.x - box.x) < 1 && Math.abs(next.y - box.y) < 1) return next;
        box = next;
      }
      return box;
    };
    page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') out.console.push(`${m.type()}: ${m.text().slice(0, 300)}`); });
    await page.goto(process.env.URL, { timeout: 60000 });
    await page.waitForSelector('.monaco-workbench', { timeout: 60000 });
    out.workbench = true;

    if (process.env.MODE === 'no-python') {
      await checkErrorNotification(page, out);
      out.probePhase = await waitForPhase(['done'], deadline);
      await page.screenshot({ path: process.env.SCREENSHOT });
      return;
    }

    if (process.env.MODE === 'notebook') {
      out.probePhase = await waitForPhase(['done'], deadline);
      const squiggle = page.locator('.notebook-editor .monaco-editor .squiggly-error').first();
      try {
        await squiggle.waitFor({ state: 'visible', timeout: 15000 });
        out.squiggle = true;
      } catch (e) {
        out.console.push(`no squiggle in a notebook cell: ${e.message}`);
      }
      out.cellSquiggles = await page.locator('.notebook-editor .monaco-editor .squiggly-error').count();
      await page.screenshot({ path: process.env.SCREENSHOT });
      out.screenshot = process.env.SCREENSHOT;
      return;
    }

    if (process.env.MODE === 'gpus') {
      await pickFromGpuList(page, out, deadline);
      return;
    }

    if (process.env.MODE === 'python') {
      out.probePhase = await waitForPhase(['ready', 'done'], deadline);
      await readPeakTooltip(page, out);
      await page.screenshot({ path: process.env.SCREENSHOT });
      out.screenshot = process.env.SCREENSHOT;
      fs.writeFileSync(process.env.PROBE_GO, 'go');
      out.probePhase = await waitForPhase(['done'], deadline);
      return;
    }

    out.probePhase = await waitForPhase(['ready', 'done'], deadline);
    if (out.probePhase === 'ready') {
      const squiggle = page.locator('.monaco-editor .squiggly-error').first();
      try {
        await squiggle.waitFor({ state: 'visible', timeout: 15000 });
        out.squiggle = true;
        await sleep(300);
        // Hover the squiggle like a user: VS Code shows the diagnostic and the server's hover.
        const hover = page.locator('.monaco-hover:not(.hidden) .monaco-hover-content, .monaco-resizable-hover .monaco-hover-content').first();
        // Code lenses and inlay hints arrive after the diagnostics and push lines down: hover only once the
        // squiggle has stayed put, and hover again if the text shown is not the diagnostic's.
        for (let attempt = 0; attempt < 5 && !(out.hoverText && out.hoverText.includes('VL001')); attempt++) {
          const box = await stableBox(squiggle);
          await page.mouse.move(box.x + Math.min(20, box.width / 2), box.y + box.height / 2, { steps: 5 });
          try {
            await hover.waitFor({ state: 'visible', timeout: 5000 });
            await sleep(500); // let the server's hover content arrive and render
            out.hoverText = await hover.innerText();
          } catch {
            out.hoverText = null;
          }
          if (!(out.hoverText && out.hoverText.includes('VL001'))) {
            await page.mouse.move(5, 5);
            await sleep(500);
          }
        }
      } catch (e) {
        out.console.push(`no squiggle: ${e.message}`);
      }
      // The peak in the status bar itself (not only in the language status popup).
      const peakItem = page.locator('.part.statusbar .statusbar-item', { hasText: /peak .*GiB/ }).first();
      try {
        await peakItem.waitFor({ state: 'visible', timeout: 15000 });
        out.statusBar = (await peakItem.innerText()).trim();
      } catch {
        out.statusBar = null;
        out.statusBarItems = await page.locator('.part.statusbar .statusbar-item').allInnerTexts();
      }
      for (let i = 0; i < 50; i++) {
        out.breakdown = await readBreakdown(page);
        if (out.breakdown.segments > 0) break;
        await sleep(200);
      }
      await page.screenshot({ path: process.env.SCREENSHOT });
      out.screenshot = process.env.SCREENSHOT;
      fs.writeFileSync(process.env.PROBE_GO, 'go');
      out.probePhase = await waitForPhase(['done'], deadline);
      await sleep(300);
      out.squiggleAfterFix = await page.locator('.monaco-editor .squiggly-error').count();
    } else {
      await page.screenshot({ path: process.env.SCREENSHOT });
      out.screenshot = process.env.SCREENSHOT;
    }
  } finally {
    await browser.close();
    process.stdout.write(JSON.stringify(out) + '\n');
  }
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ error: String((e && e.stack) || e) }) + '\n');
  process.exit(1);
});
