// The GPU picker's items: what the server's `vramlens.listGpus` command returned, as Quick Pick entries.
// Without a document (or for one with no estimate) the server sends the catalog; with one, every GPU and
// count with that run's predicted peak and tokens/s, fitting choices fastest first (server side:
// vramlens.estimate.gpu_choices, the same rows as `vramlens gpus PATH --all`).
import * as vscode from 'vscode';

/** One entry of `vramlens.listGpus`; the figures are present only when a document was estimated. */
export interface GpuEntry {
  name: string;
  memory_gib: number;
  usable_gib: number;
  count?: number;
  peak_gib?: number;
  fits?: boolean;
  tight?: boolean;
  tokens_per_s?: number;
  run_tokens_per_s?: number;
  step_s?: number;
  mfu?: number;
  bound?: string;
}

export interface GpuItem extends vscode.QuickPickItem {
  /** The catalog name to store in `vramlens.gpu`; undefined for separators. */
  gpu?: string;
  /** The GPU count to store in `vramlens.gpuCount`, when the run was tried on several counts of this GPU. */
  count?: number;
}

const number = (n: number) => Math.round(n).toLocaleString('en-US');

function hasFigures(g: GpuEntry): boolean {
  return typeof g.peak_gib === 'number' && typeof g.tokens_per_s === 'number';
}

/** Quick Pick items for the entries: with figures, "fits" and "does not fit" sections, each fastest first. */
export function gpuItems(entries: GpuEntry[], current: string | undefined): GpuItem[] {
  if (!entries.some(hasFigures)) {
    return entries.map((g) => ({
      label: g.name,
      gpu: g.name,
      description: `${g.memory_gib} GiB${g.name === current ? ' · current' : ''}`,
      picked: g.name === current,
    }));
  }
  const counts = new Map<string, number>();
  for (const g of entries) {
    counts.set(g.name, (counts.get(g.name) ?? 0) + 1);
  }
  const items: GpuItem[] = [];
  let section: boolean | undefined;
  for (const g of entries.filter(hasFigures)) {
    const fits = g.fits === true;
    if (section !== fits) {
      section = fits;
      items.push({ label: fits ? 'fits this run' : 'does not fit', kind: vscode.QuickPickItemKind.Separator });
    }
    const count = g.count ?? 1;
    const several = (counts.get(g.name) ?? 0) > 1;
    const speed = count > 1
      ? `${number(g.run_tokens_per_s ?? g.tokens_per_s! * count)} tokens/s (${number(g.tokens_per_s!)} per GPU)`
      : `${number(g.tokens_per_s!)} tokens/s`;
    const isCurrent = g.name === current;
    items.push({
      label: `${fits ? (g.tight ? '$(warning)' : '$(check)') : '$(error)'} ${g.name}${count > 1 ? ` × ${count}` : ''}`,
      gpu: g.name,
      count: several ? count : undefined,
      description: `${g.peak_gib!.toFixed(1)} / ${g.usable_gib.toFixed(1)} GiB · ${speed}${isCurrent ? ' · current' : ''}`,
      detail: fits
        ? `${g.tight ? 'fits, tight · ' : ''}step ${(g.step_s ?? 0).toFixed(2)} s · MFU ${Math.round((g.mfu ?? 0) * 100)} % · ${g.bound ?? ''}-bound`
        : `does not fit: peak ${g.peak_gib!.toFixed(1)} GiB, ${g.usable_gib.toFixed(1)} GiB usable`,
      picked: isCurrent,
    });
  }
  return items;
}
