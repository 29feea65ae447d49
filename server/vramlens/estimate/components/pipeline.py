"""Pipeline stages: the layers and parameters each rank holds and the micro-batches whose activations are in flight
(1F1B, interleaved). Megatron-LM's layouts are counted in `megatron`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from vramlens.estimate.components.common import DTYPE_BYTES
from vramlens.estimate.shapes import shapes
from vramlens.resolved import ResolvedPlan


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline rank: what it holds of the model and how many micro-batches' activations are in flight."""

    name: str  # "first", "last" or "only"
    dense_params: int  # non-expert parameters on this rank, before tensor parallelism
    expert_params: int  # routed-expert parameters on this rank, before expert parallelism
    layers: int  # decoder layers on this rank
    in_flight: float  # micro-batches whose activations it holds at once (1F1B / interleaved)
    embedding: bool
    head: bool
    vision_params: int = 0  # a VLM's vision tower and projector on this rank, whole (not split by TP or EP)


def stage_layers(rp: ResolvedPlan) -> int:
    """Decoder layers on one pipeline rank: an even split (Megatron-core requires layers divisible by PP unless the
    first/last stage are sized apart, `--decoder-first-pipeline-num-layers`)."""
    return math.ceil(rp.arch.layers / max(rp.pipeline_parallel, 1))


def stage_layer_counts(rp: ResolvedPlan) -> tuple[int, int, int]:
    """Decoder layers on the (first, middle, last) pipeline ranks. With `--decoder-first-pipeline-num-layers` /
    `--decoder-last-pipeline-num-layers` those stages hold the given counts and the other stages split the rest
    evenly (Megatron-LM 7cdba422 megatron/core/transformer/transformer_block.py `get_num_layers_to_build`:
    `layers_to_distribute // pipeline_stages_left`, 0 when no stage is left); otherwise every stage holds
    `stage_layers`."""
    pp = max(rp.pipeline_parallel, 1)
    first, last = rp.first_stage_layers, rp.last_stage_layers
    if pp == 1 or (first is None and last is None):
        n = stage_layers(rp)
        return n, n, n
    rest = rp.arch.layers - (first or 0) - (last or 0)
    left = pp - (first is not None) - (last is not None)
    middle = math.ceil(max(rest, 0) / left) if left > 0 else 0
    return (
        middle if first is None else min(max(first, 0), rp.arch.layers),
        middle,
        middle if last is None else min(max(last, 0), rp.arch.layers),
    )


def in_flight_microbatches(rp: ResolvedPlan, rank: int) -> float:
    """Micro-batches whose activations pipeline rank `rank` holds at its peak. 1F1B (megatron/core/pipeline_parallel/
    schedules.py `forward_backward_pipelining_without_interleaving`: `num_warmup_microbatches = pp - rank - 1`, then one
    more forward before the first backward): min(M, pp − rank). Interleaved with V chunks per rank
    (`forward_backward_pipelining_with_interleaving`: `(pp - rank - 1) * 2 + (V - 1) * pp` warm-up chunk forwards + 1),
    each chunk 1/V of the rank's layers; for rank 0 that is pp·(1 + (pp − 1)/(pp·V)), theoretical_memory_usage's
    `interleaved_schedule_memory_penalty`. M = micro-batches per step (gradient accumulation)."""
    pp = max(rp.pipeline_parallel, 1)
    m = max(rp.grad_accum, 1)
    if pp == 1:
        return 1.0
    v = max(rp.virtual_pipeline, 1)
    if v == 1:
        return float(min(m, pp - rank))
    chunks = min(m * v, (pp - rank - 1) * 2 + (v - 1) * pp + 1)
    return chunks / v


def stages(rp: ResolvedPlan) -> list[Stage]:
    """The first and the last pipeline rank, and the second when more than two stages hold more layers than the
    first (uneven stages, `stage_layer_counts`; with an even split the middle ones hold less than the first: the
    same layers, fewer micro-batches in flight, no embedding). The first holds the word embeddings, the last the
    output layer and the final norm; with tied embeddings the last keeps its own copy of the embedding for the output
    layer (megatron/core/models/common/language_module/language_module.py `setup_embeddings_and_output_layer`). A
    VLM's vision tower and projector are on the first stage, whole on every tensor-parallel rank: Megatron-SWIFT
    builds them from the Hugging Face model's modules, not as Megatron parallel layers, and only where `pre_process`
    holds (ms-swift v4.0.0 swift/megatron/model/mm_gpt_model.py `MultimodalGPTModel.__init__`: `if pre_process and
    self.megatron_model_meta.visual_cls is not None: self.visual = ...visual_cls(config)`; mm_gpts/utils.py
    `HuggingFaceModule.__init__` takes the HF model's `visual`)."""
    s = shapes(rp.arch)
    arch = rp.arch
    expert_total = sum(l.params for l in s.linears if l.expert)
    per_layer_dense = (s.total - s.embed_params - s.lm_head_params - expert_total) / max(arch.layers, 1)
    per_layer_expert = expert_total / max(arch.layers - arch.dense_layers, 1) if expert_total else 0
    pp = max(rp.pipeline_parallel, 1)
    n_first, n_middle, n_last = stage_layer_counts(rp)
    scalar = rp.scalar_head
    head = 0 if scalar else s.embed_params if arch.tied_embeddings else s.lm_head_params

    def moe_layers(start: int, n: int) -> int:
        """MoE layers among the stage's `n` layers from layer `start` (the leading dense layers come first)."""
        return max(min(start + n, arch.layers) - max(start, arch.dense_layers), 0) if expert_total else 0

    first = Stage(
        "only" if pp == 1 else "first",
        int(n_first * per_layer_dense + s.embed_params + (s.lm_head_params if pp == 1 and not scalar else 0)),
        int(moe_layers(0, n_first) * per_layer_expert),
        n_first,
        in_flight_microbatches(rp, 0),
        True,
        pp == 1,
        arch.vision_params,
    )
    if pp == 1:
        return [first]
    last = Stage(
        "last",
        int(n_last * per_layer_dense + head),
        int(moe_layers(arch.layers - n_last, n_last) * per_layer_expert),
        n_last,
        in_flight_microbatches(rp, pp - 1),
        False,
        True,
    )
    out = [first, last]
    if pp > 2 and n_middle > n_first:
        out.insert(
            1,
            Stage(
                "middle",
                int(n_middle * per_layer_dense),
                int(moe_layers(n_first, n_middle) * per_layer_expert),
                n_middle,
                in_flight_microbatches(rp, 1),
                False,
                False,
            ),
        )
    return out


def pipeline_stage_share(rp: ResolvedPlan) -> float:
    """The busiest pipeline rank's share of the model's parameters (1 without pipeline parallelism)."""
    if rp.pipeline_parallel <= 1:
        return 1.0
    total = max(shapes(rp.arch).total, 1)
    return min(max(st.dense_params + st.expert_params for st in stages(rp)) / total, 1.0)


# --- torch's own pipelining (torch.distributed.pipelining, as torchtitan runs it) ----------------------------------
# torch 2.14 torch/distributed/pipelining/stage.py and schedules.py; torchtitan b5bcd76
# torchtitan/distributed/pipeline_parallel.py (`pipeline_llm`, `_build_pipeline_schedule`) and trainer.py
# (`pp_forward_backward_step`: `return_outputs=False`).


@dataclass(frozen=True, slots=True)
class PipelineTokens:
    """What one micro-batch keeps, per token, for the stage terms of `torch_pipeline_phases` (bytes)."""

    layer: float  # one decoder layer's saved activations (its checkpointed input under checkpointing)
    hidden: float  # one hidden state in the compute dtype: a stage's output and the receive buffers
    input_saved: bool  # a layer keeps its input (checkpointing): a stage's first layer keeps the receive buffer
    recompute: float  # one layer recomputed and its backward (checkpointing), else 0
    head: float  # the last stage's final norm and logits/loss at the loss, per token of the micro-batch


def torch_pipeline_loss_per_token(rp: ResolvedPlan) -> float:
    """The last stage's logits and loss at the loss's backward, per token: the stage's output logits in the compute
    dtype, which the stage holds for its backward (stage.py `forward_one_chunk`: `fwd_cache`), and torchtitan's
    loss on them (torchtitan b5bcd76 torchtitan/components/loss.py `cross_entropy_loss`: `cross_entropy(pred.float(),
    labels, reduction="sum")`): the fp32 copy feeds `log_softmax`, which keeps its fp32 output; its backward makes
    the NLL gradient and the log-softmax gradient, fp32 each, while the output is alive: c + 3 × 4 bytes per logit."""
    if rp.scalar_head:
        return 0.0
    return rp.arch.vocab * (DTYPE_BYTES[rp.compute_dtype] + 3 * 4)


def torch_pipeline_phases(
    rp: ResolvedPlan, st: Stage, state: dict[str, int], per: PipelineTokens
) -> dict[str, dict[str, int]]:
    """The phases of one rank of a torch.distributed.pipelining run with one stage per rank (GPipe-free 1F1B), from
    the whole model's state on one GPU (`state`: weights, gradients, optimizer, optimizer-step temporaries, buffers)
    and what one micro-batch keeps (`per`). By construction from torch's pipelining:
    - the rank holds its stage's parameters, their gradients and optimizer state (the share of `st`);
    - it keeps the activations of `st.in_flight` micro-batches: 1F1B runs `min(M, stages - stage_index)` forwards
      before its first backward (schedules.py `Schedule1F1B._step_microbatches`: `warmup_chunks`), each keeping its
      layers' saved tensors and, but on the last stage, its output, which the stage holds for the backward
      (stage.py `forward_one_chunk`: `self.fwd_cache[fwd_chunk_id] = (output_tuple, flatten_input_tensors)`);
    - a stage that is not the first keeps one activation receive buffer per micro-batch for the whole step and
      computes on it in place (`_setup_forward_recv_info`: `buffer=_make_tensor_from_meta(meta, self.device)` for
      every chunk; `_retrieve_recv_activations`: `info.buffer.requires_grad_(...)`), so its first layer's input is
      that buffer; a stage that is not the last keeps one gradient receive buffer per micro-batch
      (`_create_grad_recv_info`);
    - the gradients exist beside the in-flight micro-batches once a backward has run before a forward, when M >
      `in_flight`; with M = `in_flight` the first backward begins with every micro-batch in flight and no gradient,
      the second with one micro-batch fewer and every gradient;
    - the last stage adds its final norm and the loss of one micro-batch (1F1B runs its backward right after its
      forward; with `return_outputs=False` the schedule keeps no output chunk: stage.py `if self.is_last and
      save_forward_output: self.output_chunks.append(output)`).
    Checkpointing keeps each layer's input per micro-batch and recomputes one layer in the backward."""
    total = max(state.get("params", 0), 1)
    share = (st.dense_params + st.expert_params) / total
    m = max(rp.grad_accum, 1)
    tok = rp.micro_batch * rp.sequences_per_example * rp.seq_len
    first, last = st.embedding, st.head
    held = st.layers * per.layer + (0 if last else per.hidden) - (per.hidden if per.input_saved and not first else 0)
    recv = ((0 if first else m) + (0 if last else m)) * per.hidden * tok
    w, g, o = (int(state[k] * share) for k in ("weights", "gradients", "optimizer"))
    g_held = g if m > st.in_flight else 0
    base = {
        "weights": w,
        "optimizer": o,
        "optimizer_paged": int(state.get("optimizer_paged", 0) * share),
        "buffers": state.get("buffers", 0) + int(recv),
    }
    acts = int(tok * held * st.in_flight)
    out = {
        "forward-backward": {
            **base,
            "gradients": g_held,
            "activations": acts,
            "logits": int(tok * per.head) if last else 0,
        },
        "optimizer-step": {**base, "gradients": g, "temporaries": int(state.get("temporaries", 0) * share)},
    }
    if per.recompute:
        out["recompute"] = {**base, "gradients": g_held, "activations": acts + int(tok * per.recompute)}
    if m <= st.in_flight and st.in_flight > 1:
        # every micro-batch was in flight at the first backward: the second one runs with one micro-batch fewer and
        # every gradient made (checkpointed micro-batches keep less than the gradients weigh)
        fewer = int(tok * held * (st.in_flight - 1))
        out["second-backward"] = {
            **base,
            "gradients": g,
            "activations": fewer + int(tok * per.recompute),
        }
    return out


# --- device_map: one process, its model's layers spread over several GPUs (naive model parallelism) ---------------
# accelerate 1.15.0 src/accelerate/utils/modeling.py, as transformers' `from_pretrained(device_map="auto")` runs it
# (modeling_utils `_get_device_map`: `get_balanced_memory`, then `infer_auto_device_map`; ms-swift's MP + DDP patch
# calls the same two over each process's GPUs: v4.0.0 swift/model/patcher.py `_infer_auto_device_map_patch`).


def device_map_devices(rp: ResolvedPlan) -> list[Stage]:
    """What each of a process's `devices_per_process` GPUs holds under accelerate's balanced device map, by
    construction. `get_balanced_memory`: every GPU but the last may take `model size // n` plus a buffer of 1.25 ×
    the larger of one no-split block and the mean leaf module (`buffer = int(1.25 * max(buffer, mean_leaves))`); the
    last GPU keeps its whole memory. `infer_auto_device_map` then fills the GPUs in module order (embeddings, the
    blocks, the final norm, the LM head), never splitting a block, and keeps the largest remaining layer's size free
    on the first GPU (`main_devices = [gpus[0], "cpu"]`: `current_max_size - max_layer_size`). A head tied to the
    embeddings is placed with them (`get_module_size_with_ties`), so it runs — with the logits and the loss — on the
    first GPU. Sizes are counted at one dtype, as accelerate counts them (quantized models at the target dtype)."""
    s = shapes(rp.arch)
    n = max(rp.devices_per_process, 1)
    layers = max(rp.arch.layers, 1)
    tied = rp.arch.tied_embeddings or s.lm_head_params == 0
    embed, head = s.embed_params, 0 if tied else s.lm_head_params
    block = max((s.total - embed - head) / layers, 1.0)
    per_gpu = s.total // n + int(1.25 * block)
    modules: list[tuple[str, float]] = [("embed", embed)] + [("block", block)] * layers + [("head", head)]
    used = [0.0] * n
    held = [[0, False, False] for _ in range(n)]  # layers, embedding, head
    device = 0
    for i, (kind, size) in enumerate(modules):
        while device < n - 1:
            # the largest layer still to place (a tied head counts nothing: its weight is the embedding's, and
            # `compute_module_sizes` counts a shared tensor once)
            reserve = max((sz for _, sz in modules[i + 1 :]), default=0.0) if device == 0 else 0.0
            if used[device] + size <= per_gpu - reserve:
                break
            device += 1
        used[device] += size
        if kind == "block":
            held[device][0] += 1
        elif kind == "embed":
            held[device][1] = True
            held[device][2] = held[device][2] or tied
        else:
            held[device][2] = held[device][2] or not tied
    out = []
    for d, (k, emb, hd) in enumerate(held):
        out.append(Stage(f"GPU {d}", int(used[d]), 0, int(k), 1.0, bool(emb), bool(hd)))
    return out


# the phases' components and what each scales with on one GPU of the map
_WEIGHT_PARTS = ("weights", "quant_constants", "reference", "reward_model", "value_model", "teacher")
_TRAINED_PARTS = ("adapters", "gradients", "optimizer", "optimizer_paged")
_HEAD_PARTS = ("logits", "teacher_logits")


def device_map_phases(
    rp: ResolvedPlan,
    phases: dict[str, dict[str, int]],
    block_activations: dict[str, int],
    embed_bytes: int,
    head_bytes: int,
) -> tuple[dict[str, dict[str, int]], Stage]:
    """The phases of the busiest GPU of a device map, from the phases of the whole model on one GPU. The forward runs
    the GPUs one after another and the backward back, so each GPU holds its own blocks' weights, gradients and
    optimizer states and every saved activation of its blocks for the whole step; the logits and the loss live on the
    GPU with the LM head. `block_activations`: what one more block adds to each phase's activations (the rest — one
    block's recompute or attention transients, the final norm — stays whole on every GPU). `embed_bytes`/`head_bytes`:
    the embedding's and the untied head's weights as held (16-bit beside quantized blocks)."""
    devs = device_map_devices(rp)
    layers = max(rp.arch.layers, 1)
    total_params = max(sum(st.dense_params for st in devs), 1)
    peft = rp.peft != "none"
    best: tuple[int, dict[str, dict[str, int]], Stage] | None = None
    for st in devs:
        act = st.layers / layers
        trained = act if peft else st.dense_params / total_params
        out: dict[str, dict[str, int]] = {}
        for name, parts in phases.items():
            new = {}
            for k, v in parts.items():
                if k in ("weights", "quant_constants"):
                    v = _weight_share(
                        v, st, layers, embed_bytes if k == "weights" else 0, head_bytes if k == "weights" else 0
                    )
                elif k in _WEIGHT_PARTS:
                    v = int(v * st.dense_params / total_params)
                elif k in _TRAINED_PARTS:
                    v = int(v * trained)
                elif k in _HEAD_PARTS:
                    v = v if st.head else 0
                elif k == "activations":
                    v = max(int(v - block_activations.get(name, 0) * (layers - st.layers)), 0)
                elif k == "temporaries" and name == "optimizer-step":
                    v = int(v * trained)
                elif k == "temporaries" and name == "end-of-backward":
                    v = v if st.embedding else 0  # the embedding's second gradient
                new[k] = v
            out[name] = new
        peak = max(sum(p.values()) - p.get("optimizer_paged", 0) for p in out.values())
        if best is None or peak > best[0]:
            best = (peak, out, st)
    assert best is not None
    return best[1], best[2]


def _weight_share(total: int, st: Stage, layers: int, embed_bytes: int, head_bytes: int) -> int:
    """A GPU's weights: its blocks' share of the blocks' bytes, plus the embedding and the head where they are."""
    blocks = max(total - embed_bytes - head_bytes, 0)
    return int(blocks * st.layers / layers + (embed_bytes if st.embedding else 0) + (head_bytes if st.head else 0))


def device_map_note(rp: ResolvedPlan, peak: Stage) -> str:
    """The estimate's assumption: how the layers are spread and which GPU is the peak."""
    devs = device_map_devices(rp)
    spread = ", ".join(
        f"{st.name}: {st.layers} blocks" + (" + embeddings" if st.embedding else "") + (" + LM head" if st.head else "")
        for st in devs
    )
    return (
        f"device_map over {len(devs)} GPUs per process (accelerate's balanced placement; {spread}); the figure is "
        f"{peak.name}'s, the busiest: its blocks' weights, gradients, optimizer states and saved activations"
        + (", and the logits and loss" if peak.head else "")
    )
