// Unit tests of the extension's code that does not need VS Code (test/*.test.ts): type-checked with tsc,
// bundled with esbuild into out/test/, run with node:test. Usage: node scripts/test.mjs
import { spawnSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const EXT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const OUT = join(EXT, 'out', 'test');

const tsc = spawnSync(process.execPath, [join(EXT, 'node_modules', 'typescript', 'bin', 'tsc'), '--noEmit', '-p', EXT],
  { stdio: 'inherit' });
if (tsc.status !== 0) {
  process.exit(tsc.status ?? 1);
}
rmSync(OUT, { recursive: true, force: true });
const tests = readdirSync(join(EXT, 'test')).filter((f) => f.endsWith('.test.ts'));
await esbuild.build({
  entryPoints: tests.map((f) => join(EXT, 'test', f)),
  outdir: OUT,
  bundle: true,
  external: ['vscode'],
  format: 'cjs',
  platform: 'node',
  target: 'node18',
  logLevel: 'warning',
});
const run = spawnSync(process.execPath, ['--test', ...tests.map((f) => join(OUT, f.replace(/\.ts$/, '.js')))],
  { stdio: 'inherit' });
process.exit(run.status ?? 1);
