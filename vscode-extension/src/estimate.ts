// The `vramlens/estimate` notification the server sends after each analysis of a document,
// and the short texts shown for it (language status item, breakdown title).

export const ESTIMATE_NOTIFICATION = 'vramlens/estimate';

export interface Estimate {
  uri: string;
  version: number | null;
  /** `assumed`: no GPU was named (nor detected), so the server judged against its default GPU. */
  gpu: { name: string; count: number; usable_gib: number; assumed?: boolean };
  peak: { allocated_gib: number; reserved_gib: number; device_gib: number };
  /** GiB per component (weights, gradients, optimizer, activations, logits, temporaries, overhead, ...). */
  components_gib: Record<string, number>;
  /** Phase that sets the peak, e.g. "forward-backward", "optimizer-step", "reference-forward", "generation". */
  phase: string;
  /** What the step optimises: "sft", "dpo", "grpo", "kd", ... (absent from servers that predate it). */
  objective?: string;
  fits: boolean;
  headroom_gib: number;
  /** Allocator-level peak from an exact trace, null unless one was run. */
  exact_gib: number | null;
}

/** 71.25 -> "71.3", 40 -> "40", 39.99 -> "40". */
export function gib(value: number): string {
  if (!Number.isFinite(value)) {
    return '?';
  }
  const rounded = Math.round(value * 10) / 10;
  return Number.isInteger(rounded) ? rounded.toFixed(0) : rounded.toFixed(1);
}

export function gpuLabel(e: Estimate): string {
  return e.gpu.count > 1 ? `${e.gpu.count}× ${e.gpu.name}` : e.gpu.name;
}

/** Language status text, e.g. "A100-40GB · 71.3/40 GiB" (peak on the device / usable per GPU). */
export function statusText(e: Estimate): string {
  const assumed = e.gpu.assumed ? ' (assumed)' : '';
  return `${gpuLabel(e)}${assumed} · ${gib(e.peak.device_gib)}/${gib(e.gpu.usable_gib)} GiB`;
}

/** Status bar text, e.g. "peak 71.3/39.4 GiB A100-40GB" (the same figures as the language status item). */
export function statusBarText(e: Estimate): string {
  const assumed = e.gpu.assumed ? ' (assumed)' : '';
  return `peak ${gib(e.peak.device_gib)}/${gib(e.gpu.usable_gib)} GiB ${gpuLabel(e)}${assumed}`;
}

export function statusDetail(e: Estimate): string {
  const verdict = e.fits
    ? `fits with ${gib(e.headroom_gib)} GiB to spare`
    : `does not fit: ${gib(-e.headroom_gib)} GiB over`;
  const exact = e.exact_gib !== null && e.exact_gib !== undefined ? `, exact trace ${gib(e.exact_gib)} GiB` : '';
  const objective = e.objective && e.objective !== 'sft' ? ` (${e.objective.toUpperCase()})` : '';
  const assumed = e.gpu.assumed
    ? ` — ${e.gpu.name} assumed: no GPU named; choose one with "vramlens: Pick GPU", a .vramlens.toml or a # vramlens: gpu=… comment`
    : '';
  return `Peak per GPU in ${e.phase.replace(/_/g, ' ')}${objective}: ${verdict}${exact}${assumed}`;
}

/** The same notification when the document's latest version has no estimate (it does not parse, it is
 *  not a training config, the model is unknown): whatever was shown for an earlier version goes. */
export interface NoEstimate {
  uri: string;
  version: number | null;
  reason: string;
}

export function isNoEstimate(value: unknown): value is NoEstimate {
  const e = value as NoEstimate & { peak?: unknown };
  return !!e && typeof e.uri === 'string' && typeof e.reason === 'string' && e.peak === undefined;
}

/** A runtime check of the notification's shape, so a malformed message cannot break the UI. */
export function isEstimate(value: unknown): value is Estimate {
  const e = value as Estimate;
  return !!e && typeof e.uri === 'string' && !!e.gpu && typeof e.gpu.name === 'string'
    && !!e.peak && typeof e.peak.device_gib === 'number' && !!e.components_gib
    && typeof e.components_gib === 'object';
}
