"""estimate: ResolvedPlan → Estimate. Pure arithmetic, no torch, well under a millisecond.

Peak = persistent memory + the largest of the step's transient phases, never a sum of everything
(docs/memory-model.md):
  forward-backward  W + O [+ G when gradients persist] + saved activations + final norm + logits/loss
  loss-forward      the same at the loss's forward, while autocast's cache holds every block's 16-bit weight
                    copies (AMP with checkpointing only)
  recompute         W + O + G (all but the embedding's) + checkpoints + one block recomputed (checkpointing
                    only; gradients freed each step: the larger of every checkpoint with the head's gradients
                    and every gradient with one checkpoint)
  end-of-backward   W + O + G + a second embedding gradient (tied embeddings accumulate out of place)
  optimizer-step    W + G + O + step temporaries (foreach)
  evaluation        W + O [+ G when gradients persist] + one block of a no-grad forward of the evaluation batch
                    + its logits and loss (only when the trainer evaluates during training)
Then the allocator (reserved) and the CUDA context (device) on top.
"""

from __future__ import annotations

from vramlens.estimate import allocator
from vramlens.estimate import components as C
from vramlens.estimate.components import evaluation as E
from vramlens.estimate.components import gemma3n
from vramlens.estimate.components.liger import final_norm_per_token as liger_final_norm
from vramlens.estimate.components.logits import swift_dpo_per_logit, swift_dpo_rows, swift_gkd_bytes
from vramlens.estimate.result import COMPONENTS, GIB, Estimate
from vramlens.estimate.throughput import throughput
from vramlens.knowledge.gpus import usable_bytes
from vramlens.knowledge.pipelining import MULTI_STAGE_SCHEDULES
from vramlens.resolved import ResolvedPlan

__all__ = ["estimate", "allocated_peak", "pipeline_rank_peak", "Estimate", "GIB", "COMPONENTS", "REVISION"]

# Bumped whenever a formula changes what an estimate comes to: local calibration records (trace/probe ratios to
# the estimate of their day) made against another revision are ignored (vramlens.calibration).
REVISION = 28


def _phases(rp: ResolvedPlan) -> tuple[dict[str, int], dict[str, dict[str, int]], C.Params, float]:
    """Allocated bytes of each candidate phase, with the breakdown of each."""
    if rp.devices_per_process > 1 and rp.strategy != "megatron":
        return _device_map_phases(rp)[:4]
    if torch_pipeline(rp):
        return _torch_pipeline_phases(rp)
    rp = C.as_loaded(rp)
    p = C.params(rp)
    if rp.strategy == "megatron":
        return _megatron_phases(rp, p)
    cp = max(rp.context_parallel, 1)
    seqs = rp.micro_batch * rp.sequences_per_example  # chosen + rejected: twice the sequences
    tok = seqs * (rp.seq_len // cp)
    logit_tok = seqs * ((rp.logits_tokens or rp.seq_len) // cp)
    W = C.weights(rp, p)
    G = C.gradients(rp, p)
    O = C.optimizer_state(rp, p)
    paged = 0
    if rp.optimizer.paged:
        # bitsandbytes paged states are cudaMallocManaged buffers: on the device, outside torch's allocator
        # (not in max_memory_allocated); the device level counts them (`get_paged`, bitsandbytes/functional.py)
        paged, O = O, 0
    paged += C.value_model_paged_state(rp)
    T = C.optimizer_temporaries(rp, p)
    B = C.zero_buffers(rp, p)
    # ZeRO-2's and ZeRO-3's buffers at the loss, the top block's backward and the optimizer step: buckets, ZeRO-3's
    # gathered parameters (C.zero_step_buffers); B is what the other phases hold
    zs = C.zero_step_buffers(rp, p) or {}
    quant = p.quant_constants
    adapters = 0
    if rp.peft != "none":
        adapters = int(p.trainable_bytes * C.shard_factor(rp, "weights")) if not rp.offload_params else 0
        W -= adapters
    all_layers, one_layer = C.activations_per_token(rp)
    logits = 0 if rp.scalar_head else C.head_loss_bytes(rp, logit_tok)
    # torchtitan's TP plan runs the final norm sequence-parallel (`apply_tp`: "norm": SequenceParallel()), and its
    # loss parallel keeps the logits sharded over the vocabulary (`output`: ColwiseParallel(output_layouts=Shard(-1))
    # under `loss_parallel`; torchtitan v0.2.2 torchtitan/models/llama3/infra/parallelize.py): C.loss_parallel_per_token
    tp = max(rp.tensor_parallel, 1)
    final = liger_final_norm(rp, C.final_norm_per_token(rp)) * tok / (tp if rp.sequence_parallel else 1)
    if rp.loss_parallel and not rp.scalar_head:
        logits = int(logit_tok * C.loss_parallel_per_token(rp))
    amp_cache = C.autocast_weight_cache(rp, p)
    mask, mask_per_layer = C.attention_mask_bytes(rp.with_changes(micro_batch=seqs) if seqs != rp.micro_batch else rp)
    # ZeRO-3's flat gradient partition outlives zero_grad (components.zero3_persistent_gradients)
    g_persistent = G if C.zero3_persistent_gradients(rp) else 0
    g_resident = G if (rp.grad_accum > 1 or not rp.set_to_none or g_persistent) else 0

    # frozen layers below the lowest trained one are outside the autograd graph: they save nothing (and, under
    # checkpointing, keep no block input) — components.backward_layers
    held = min(C.backward_layers(rp, worst=True) / C.counted_layers(rp), 1.0)
    # what the blocks keep under checkpointing of every block, every n-th block or by op (components.saved_per_token)
    ckpt_all, ckpt_top, ckpt_bottom = C.saved_per_token(rp) if C.recomputes(rp) else (0.0, 0.0, 0.0)
    if C.recomputes(rp):
        saved = 0 if rp.activation_offload else int(tok * ckpt_all * held)
    elif rp.activation_offload:
        saved = int(tok * one_layer * 2)  # offloaded activations stream through ~2 layers
    else:
        saved = int(tok * all_layers * held)
    layers_saved = C.layers_keeping_everything(rp) if C.recomputes(rp) else round(rp.arch.layers * held)
    # per-block weight-sized tensors kept for backward: DoRA's weight copies, adapted experts' W + BA
    dora_w = C.dora_weight_copies(rp)
    # torchao's fake-quantized linears: their rounded copies kept per block (components.qat_block_bytes)
    qat_w = C.qat_block_bytes(rp, tok)
    expert_w = C.expert_weight_copies(rp)
    moe_saved = (
        round((rp.arch.layers - rp.arch.dense_layers) * layers_saved / max(rp.arch.layers, 1))
        if C.recomputes(rp)
        else round((rp.arch.layers - rp.arch.dense_layers) * held)
    )
    t5_bias = C.t5_bias_bytes(rp)  # T5's relative position bias: per step, not per token
    acts_fb = (
        saved
        + int(final)
        + amp_cache
        + mask
        + layers_saved * (mask_per_layer + dora_w + qat_w)
        + moe_saved * (expert_w + C.ep_gathered_saved(rp, tok))
        + C.vision_activations(rp, seqs)
        + t5_bias
    )

    base = {
        "weights": W,
        "quant_constants": quant,
        "adapters": adapters,
        "buffers": B,
        "optimizer_paged": paged,
        **_other_models(rp, p),
    }
    teacher_logits = 0
    if rp.teacher is not None and rp.objective in ("gkd", "kd"):
        # (an RL objective's teacher hands over per-token log-probs only: resolve.objective `online_teacher`)
        # the teacher's logits for the batch, computed under no_grad before the student's loss and held through it
        # (torchtune knowledge_distillation_single_device.py; TRL GKD): 16-bit logits, + their fp32 log-softmax
        # inside an unchunked loss; an fp32 teacher outside autocast writes fp32 logits
        held = 4 if rp.teacher_dtype == "fp32" and not rp.amp else 2
        teacher_logits = int(tok * rp.teacher.vocab * (held + (0 if rp.loss_impl in ("chunked", "fused") else 4)))
        gkd = swift_gkd_bytes(rp, logit_tok)
        if gkd is not None:  # ms-swift's own GKD loss: its forward's peak (logits.swift_gkd_bytes)
            logits, teacher_logits = gkd
    phases: dict[str, dict[str, int]] = {}
    # FSDP keeps the root unit (embeddings, final norm, LM head) gathered from the forward through the backward
    root = C.fsdp_root_unsharded(rp)
    phases["forward-backward"] = {
        **base,
        "buffers": zs.get("forward-backward", B) + root,
        "optimizer": O,
        "gradients": g_resident,
        "teacher_logits": teacher_logits,
        "activations": acts_fb,
        "logits": logits,
        # a torchtune QLoRA linear's NF4 dequantization runs in the forward and backward of
        # the blocks, while the logits do not exist
        "temporaries": C.dequantized_head(rp) + max(0, C.nf4_dequant_transient(rp) - logits),
    }
    forward_extra = C.disentangled_forward_per_token(rp)
    if forward_extra > 0:
        # the last block's attention in the forward, every earlier block's activations saved
        # (components.disentangled_forward_per_token)
        phases["forward"] = {**phases["forward-backward"], "activations": acts_fb + int(forward_extra * tok)}
    dispatch = C.ep_dispatch_transient(rp, tok)
    if dispatch:
        # the top MoE layer's expert-parallel all-gather and all-reduce (components.dispatch): in its forward, the
        # logits not made yet, or its backward, the loss having freed them; under checkpointing that block recomputed
        recomputed = int(one_layer * tok) + C.ep_gathered_saved(rp, tok) if C.recomputes(rp) else 0
        phases["expert-dispatch"] = {
            **phases["forward-backward"],
            "activations": acts_fb + recomputed,
            "logits": 0,
            "temporaries": dispatch,
        }
    # offloads between updates (verl's param_offload / optimizer_offload, OpenRLHF's DeepSpeed sleep, ms-swift's
    # offload_model / offload_optimizer): outside the policy's update its weights and optimizer state are on the CPU;
    # `lasting`: from one update to the next (verl, OpenRLHF), else only while the engine generates (ms-swift)
    idle_w, idle_o = rp.offload_params_idle, rp.offload_optimizer_idle
    lasting = rp.offload_idle_scope != "rollout"

    def policy_held(weights_off: bool, state_off: bool) -> dict[str, int]:
        """The policy's weights (with its adapters) and optimizer state in a phase outside its update."""
        return {
            "weights": 0 if weights_off else W,
            "adapters": 0 if weights_off else adapters,
            "optimizer": 0 if state_off else O,
        }

    if rp.value_model and rp.critic_micro_batch > 0:
        # a critic trained in a step of its own (verl `update_critic`, OpenRLHF's critic group), before the policy's
        # update: its activations at its own micro-batch (the policy's scaled by the sequences; a scalar head, no
        # vocabulary logits) beside the policy's resident state, whose gradients `zero_grad` has freed
        critic_fb = acts_fb
        ckpt = rp.grad_checkpointing if rp.critic_grad_checkpointing is None else rp.critic_grad_checkpointing
        if ckpt != rp.grad_checkpointing or rp.value_arch is not None:
            # the critic checkpoints where the actor does not (or the other way round), or is another model: its
            # blocks' activations as the same step keeps them under its own setting and shapes
            own = rp.with_changes(
                arch=rp.value_arch or rp.arch, grad_checkpointing=ckpt, critic_micro_batch=0, value_arch=None
            )
            critic_fb = _phases(own)[1]["forward-backward"]["activations"]
        critic_acts = int(critic_fb * rp.critic_micro_batch / max(rp.micro_batch, 1))
        if "value_model" in rp.models_apart:
            # on the critic's own GPUs (OpenRLHF's critic group): the critic's state and step, the models that share
            # those GPUs (`critic_group`), and the engine's buffers as the policy's; nothing of the policy
            group = (
                {"reward_model": C.reward_weights(rp)} if rp.reward_model and "reward_model" in rp.critic_group else {}
            )
            phases["critic-update"] = {
                **dict.fromkeys(phases["forward-backward"], 0),
                "buffers": B,
                "value_model": C.value_model(rp, p),
                **group,
                "activations": critic_acts,
            }
        else:
            phases["critic-update"] = {
                **base,
                **policy_held(idle_w, idle_o),
                "gradients": 0,
                "activations": critic_acts,
                "logits": 0,
            }
    fwd_cache = C.autocast_forward_cache(rp)
    fsdp_fwd = C.fsdp_loss_forward_unsharded(rp)
    if (fwd_cache or fsdp_fwd is not None) and not rp.scalar_head:
        # the end of the forward, while the loss runs inside the model's forward: under AMP with checkpointing
        # autocast's cache still holds every block's 16-bit weight copies (components.autocast_forward_cache); FSDP2
        # still holds its last all-gather output, no gradient made yet (components.fsdp_loss_forward_unsharded)
        phases["loss-forward"] = {
            **phases["forward-backward"],
            "buffers": zs.get("forward-backward", B) + (root if fsdp_fwd is None else fsdp_fwd),
            "activations": acts_fb + fwd_cache,
            "logits": C.head_loss_bytes(rp, logit_tok, backward=False)
            if C.trl_fused_head(rp)
            else int(logit_tok * C.loss_forward_per_token(rp)),
        }
    if rp.reference != "none" and rp.generation == "none":
        # trl 1.16.0 dpo_trainer.py `_compute_loss`: the reference runs under no_grad after the policy's forward,
        # while the policy's saved activations and log-probs are held
        phases["reference-forward"] = {
            **phases["forward-backward"],
            "temporaries": C.no_grad_forward(rp, logit_tok, rp.reference_arch),
        }
        if swift_dpo_rows(rp):
            # the policy's head holds only its saved log-softmax while the reference runs (logits.swift_dpo_per_logit)
            phases["reference-forward"]["logits"] = int(logit_tok * rp.arch.vocab * swift_dpo_per_logit(rp, "held"))
    if rp.teacher is not None:
        phases["teacher-forward"] = {
            **base,
            "optimizer": O,
            "gradients": g_resident,
            "temporaries": C.no_grad_forward(rp, tok, rp.teacher),
            "activations": 0,
            "logits": 0,
        }
    if rp.generation != "none":
        # rollout: generate() with a KV cache, then reference/old-policy log-probs under no_grad, all before the
        # policy's forward-backward. The step starts after the last one's zero_grad: gradients set to None are gone
        # (verl 0.4.1 and 0.7.0 verl/workers/actor/dp_actor.py `update_policy` ends with `zero_grad()`; TRL
        # generates on the first micro-step of an accumulation cycle).
        kv = C.kv_cache(rp) if rp.generation == "generate" else 0
        if rp.generation == "generate" and C.zero_shard_factor(rp, "weights") < 1.0:
            # trl 1.16.0 grpo_config.py `ds3_gather_for_generation=True`: ZeRO-3 gathers the whole policy to generate
            kv += int(p.total * C.DTYPE_BYTES[rp.weight_dtype] * (1.0 - C.zero_shard_factor(rp, "weights")))
        if (
            rp.generation == "generate"
            and rp.value_model
            and C.zero_shard_factor(rp, "weights") < 1.0
            and rp.strategy == "deepspeed"
        ):
            # trl v0.18.0 ppo_trainer.py: `unwrap_model_for_generation(self.model, ...)` gathers every parameter of
            # the `PolicyAndValueWrapper` (trl/models/utils.py: `deepspeed.zero.GatheredParameters(model.
            # parameters())`), the value model's with the policy's, for the whole rollout
            n_value = C.value_params(rp)
            kv += int(n_value * C.DTYPE_BYTES[rp.weight_dtype] * (1.0 - C.zero_shard_factor(rp, "weights")))
        g_step = G if (g_persistent or not rp.set_to_none) else 0
        # while the engine generates, the offloaded policy's weights and gradients and its optimizer state are on the
        # CPU
        rollout = dict(base)
        if idle_w and not lasting and "reference" in base:
            rollout["reference"] = 0  # ms-swift's offload_model takes the reference model along
        if idle_o and "value_model" in base:
            # the value model's optimizer state goes to the CPU with the policy's (verl's critic is estimated with the
            # actor's offload settings; OpenRLHF offloads every DeepSpeed model's states)
            rollout["value_model"] -= C.value_model_state(rp)
        phases["generation"] = {
            **rollout,
            **policy_held(idle_w, idle_o),
            "gradients": 0 if idle_w else g_step,
            "temporaries": kv,
            "activations": 0,
            "logits": 0,
            "generation": _generation_share(rp),
        }
        if rp.reference != "none" or rp.reward_model or rp.value_model or rp.logprob_micro_batch:
            # the old policy's and the reference's log-probs, in log-prob micro-batches of their own where the
            # framework sizes them apart (verl `log_prob_micro_batch_size_per_gpu`)
            lp_tok = logit_tok if not rp.logprob_micro_batch else logit_tok // max(seqs, 1) * rp.logprob_micro_batch
            # the log-probs, with the weights loaded: the optimizer state still on the CPU where the offload lasts to
            # the next update (verl, OpenRLHF), back on the GPU where it lasted only the generation (ms-swift)
            phases["reference-forward"] = {
                **(rollout if lasting else base),
                **policy_held(False, idle_o and lasting),
                "gradients": 0 if idle_w and lasting else g_step,
                "activations": 0,
                "logits": 0,
                "temporaries": C.no_grad_forward(rp, lp_tok, rp.reference_arch),
            }
    attn_back = C.sdpa_math_backward_per_token(rp)
    if attn_back and not C.recomputes(rp):
        # the last block's attention backward on the math kernel: its two fp32 probability-sized temporaries,
        # after the loss has freed the logits (C.sdpa_math_backward_per_token) and, in an adapter model, the head,
        # the final norm and the last block's MLP what they saved (C.attention_backward_freed)
        phases["attention-backward"] = {
            **phases["forward-backward"],
            "logits": 0,
            "activations": acts_fb - C.attention_backward_freed(rp, tok),
            "temporaries": int(attn_back * tok),
        }
    jamba_back = None if C.recomputes(rp) else C.jamba_backward_change(rp, tok)
    if jamba_back is not None:
        # Jamba on transformers' torch path: its highest Mamba layer's recurrent scan backward, after the loss, the
        # head and the layers above it have freed what they kept (C.jamba_backward_change)
        change, made = jamba_back
        phases["mixer-backward"] = {
            **phases["forward-backward"],
            "logits": 0,
            "activations": acts_fb + change,
            "gradients": max(g_resident, made),
        }
    dora_norm = C.dora_weight_norm_transient(rp)
    if dora_norm:
        # the last adapted linear's weight-norm temporaries at the end of the forward, every activation saved
        phases["dora-weight-norm"] = {
            **base,
            "optimizer": O,
            "gradients": g_resident,
            "activations": acts_fb,
            "temporaries": dora_norm,
            "logits": 0,
        }
    if C.recomputes(rp):
        embed_grad = C.shapes(rp.arch).embed_params * p.trainable_dtype_bytes if rp.peft == "none" else 0
        # backward of the last block: every block's checkpointed input is still held (each is freed when its
        # block's backward ends), the last block is recomputed and its backward temporaries are live
        recompute = int(C.backward_block_per_token(rp) * tok) + dora_w + expert_w + C.expert_weight_grad(rp) + qat_w
        block_temps = dora_norm
        # the attention's backward runs after the block's MLP (and its experts) has finished its own
        in_attention = int(C.math_attention_block_per_token(rp) * tok) + dora_w
        if in_attention > recompute + dora_norm:  # the block peaks in its math-kernel attention's backward
            recompute, block_temps = in_attention, 0
        # every block's checkpoints while the highest recomputed block is recomputed (C.saved_per_token)
        # ZeRO-2's gradient partition is made whole at the backward's first reduce (C.zero2_gradients_whole)
        whole = bool(g_persistent) or C.zero2_gradients_whole(rp)
        grads = G if whole else max(G - int(embed_grad * C.shard_factor(rp, "gradients")), 0)
        if gemma3n.gemma3n(rp) and not g_persistent:
            # not made yet: the lowest block's, the per-layer embeddings' (gemma3n.grads_not_made_at_lowest_recompute)
            grads = max(grads - int(gemma3n.grads_not_made_at_lowest_recompute(rp) * p.trainable_dtype_bytes), 0)
        held_ckpt = 0 if rp.activation_offload else int(tok * ckpt_top * held)
        lowest = 0 if rp.activation_offload else int(tok * ckpt_bottom * held)
        # gradients freed by zero_grad(set_to_none=True) come back block by block while the checkpoints go: the last
        # block's backward holds every checkpoint but only the gradients made so far, the first block's holds every
        # gradient but one checkpoint. The live set is linear in the block reached, so the larger end is the peak
        # (torch.utils.checkpoint frees a block's saved input when its backward ends; AccumulateGrad creates each
        # gradient when its parameter's backward runs). G == 0: the optimizer steps each gradient away in backward.
        top_grads = None
        # an encoder-decoder's backward runs the decoder's blocks, then the encoder's: the same two ends
        n_layers = C.counted_layers(rp)
        if (
            G
            and not g_resident
            and not whole
            and rp.arch.block in ("decoder", "encoder", "encoder-decoder")
            and n_layers > 1
        ):
            if rp.peft == "none" and rp.trained_layers is None:
                # full fine-tuning: the LM head's gradient and the last block's (an encoder's classification head
                # is a pooler and a hidden × labels classifier: no vocabulary-sized gradient above the blocks)
                s = C.shapes(rp.arch)
                share = C.shard_factor(rp, "gradients") * p.trainable_dtype_bytes
                head = (s.embed_params if rp.arch.tied_embeddings else s.lm_head_params) * share
                if rp.arch.block == "encoder":
                    head = 0
                top_grads = int(head + s.layer_params * share)
            elif rp.peft != "none" and not rp.modules_to_save:
                # PEFT: the last block's adapters' gradients only (traced, Mistral-7B QLoRA: 1 MiB of 156 at the peak)
                top_grads = G // n_layers
        kept = C.fsdp_kept_block_grads(rp, saved)
        held_buffers = root + C.fsdp_backward_working_set(rp, p)
        # FSDP: gathered units, reduce-scatters and gradient shards block by block (C.fsdp_recompute_block)
        fsdp_block = (
            C.fsdp_recompute_block(rp, p, recompute=recompute, ckpt_all=held_ckpt, ckpt_one=lowest, grad_shards=G)
            if G and not g_resident and not kept
            else None
        )
        if kept:
            pass  # the first block's backward is the peak: every checkpoint and every gradient
        elif fsdp_block is not None:
            held_buffers, grads, held_ckpt = fsdp_block
        elif top_grads is not None:
            if top_grads + held_ckpt >= grads + lowest:
                grads = top_grads
            else:
                held_ckpt = lowest
        # the LM head's backward has run before any block's: the 16-bit head copy it kept is gone; under AMP the
        # block being recomputed holds its own weights' 16-bit copies (components.recompute_weight_copies)
        phases["recompute"] = {
            **base,
            "buffers": zs.get("recompute", B) + held_buffers,
            "optimizer": O,
            "gradients": grads,
            "activations": held_ckpt
            + kept
            + C.recompute_weight_copies(rp)
            + recompute
            + mask
            + mask_per_layer
            + t5_bias,
            "logits": 0,
            "temporaries": max(block_temps, C.nf4_dequant_transient(rp)),
        }
    if rp.arch.tied_embeddings and rp.peft == "none" and rp.arch.block != "encoder":
        # the shared weight's two gradients are summed out of place: two more embedding-sized tensors
        # (docs/memory-model.md, "Tied embeddings"). An encoder's classification head has no output embedding to
        # tie (transformers 5.24 models/bert/modeling_bert.py BertForSequenceClassification: pooler + classifier)
        extra = 2 * C.shapes(rp.arch).embed_params * p.trainable_dtype_bytes
        phases["end-of-backward"] = {
            **base,
            "optimizer": O,
            "gradients": G,
            "temporaries": int(extra),
            "activations": 0,
            "logits": 0,
        }
    elif rp.arch.block == "encoder" and rp.peft == "none" and g_resident:
        # the embedding's backward is the last: into a gradient that already exists (accumulation, or zero_grad
        # without set_to_none) AccumulateGrad adds the new embedding-sized gradient in place, both alive meanwhile
        # (torch/csrc/autograd/functions/accumulate_grad.h `accumulateGrad`: `variable_grad += new_grad`)
        extra = C.shapes(rp.arch).embed_params * p.trainable_dtype_bytes
        phases["end-of-backward"] = {
            **base,
            "optimizer": O,
            "gradients": G,
            "temporaries": int(extra),
            "activations": 0,
            "logits": 0,
        }
    if rp.evaluation:
        # the evaluation pass between optimizer steps: the training state at the step boundary (gradients set to None
        # by zero_grad are gone, unless the loop zeroes them only when the next step begins), one no-grad forward
        # of the evaluation batch (components.evaluation)
        phases["evaluation"] = {
            **base,
            "buffers": B + root,
            "optimizer": O,
            "gradients": G if (g_persistent or not rp.set_to_none or rp.eval_with_gradients) else 0,
            "activations": E.eval_forward_activations(rp),
            "logits": E.eval_head_loss(rp),
            "temporaries": 0,
        }
    # DeepSpeed's fp32 copy of the gradient partition it steps on (components.zero_step_grad_copy)
    value_trained = C.value_params(rp) if rp.value_model and rp.peft == "none" else 0
    T += C.zero_step_grad_copy(rp, p, value_trained)
    phases["optimizer-step"] = {
        **base,
        "buffers": zs.get("optimizer-step", B),
        "optimizer": O,
        "gradients": G,
        "temporaries": T,
        "activations": 0,
        "logits": 0,
    }
    if rp.correction != 1.0:
        # a local calibration (trace or probe of this architecture) scales what torch allocates
        for parts in phases.values():
            for k in parts:
                if k != "optimizer_paged":
                    parts[k] = int(parts[k] * rp.correction)
    totals = {name: sum(parts.values()) - paged for name, parts in phases.items()}  # allocated level
    per_sample = int((saved + final + logits + mask + layers_saved * mask_per_layer) / max(rp.micro_batch, 1))
    return totals, phases, p, per_sample


def torch_pipeline(rp: ResolvedPlan) -> bool:
    """Pipeline stages run by torch's own pipelining (torchtitan's `pipeline_parallel_degree`), replicated or sharded
    with FSDP over the data-parallel ranks (each stage's module wrapped by `fully_shard`: torchtitan v0.2.2
    torchtitan/models/llama3/infra/parallelize.py `parallelize_llama` runs on every model part `pipeline_llm`
    builds): `components.torch_pipeline_phases`. Megatron-core's interleaved schedule (virtual_pipeline with its
    own 1F1B) is Megatron's."""
    interleaved = rp.virtual_pipeline > 1 and rp.pipeline_schedule not in MULTI_STAGE_SCHEDULES
    return rp.pipeline_parallel > 1 and rp.strategy in ("none", "ddp", "fsdp") and not interleaved


def _torch_pipeline_stages(rp: ResolvedPlan) -> tuple[list[tuple[C.Stage, dict[str, dict[str, int]]]], C.Params]:
    """Each pipeline rank's phases (first, the busiest middle one, last; every rank under the framework's own split),
    from the whole model's state on one GPU and what one micro-batch keeps (components.torch_pipeline_phases)."""
    one = rp.with_changes(
        pipeline_parallel=1, grad_accum=1, first_stage_layers=None, last_stage_layers=None, stage_split=()
    )
    _, whole, p, _ = _phases(one)
    step = whole["optimizer-step"]
    loaded = C.as_loaded(one)
    state = {
        k: step.get(k, 0) for k in ("weights", "gradients", "optimizer", "optimizer_paged", "temporaries", "buffers")
    }
    state["params"] = C.shapes(loaded.arch).total
    if loaded.strategy == "fsdp":
        # FSDP2 under torch's schedules keeps each stage's parameters unsharded from their backward and accumulates
        # their gradients unsharded until the step's last backward (torch 2.14 torch/distributed/pipelining/stage.py
        # `backward_maybe_with_nosync`: `set_reshard_after_backward(False)`, `set_requires_gradient_sync(False)`;
        # `perform_reduce_grad` once every micro-batch's backward has run): the whole model's unsharded parameters
        # and gradients, and what FSDP gathers for one block in the model's sharded step on one GPU
        # (of the routed experts, under expert parallelism, the rank's own: components.fsdp_model_params)
        gathered = C.DTYPE_BYTES[loaded.compute_dtype if C.fsdp_gathers_16bit(loaded) else loaded.weight_dtype]
        unsharded = C.fsdp_model_params(loaded)
        state["gathered"] = int(unsharded * gathered)
        full = loaded.peft == "none" and loaded.trained_layers is None
        own = unsharded * max(loaded.tensor_parallel, 1) / max(state["params"], 1) if full else 1.0
        state["accumulated"] = int(state["gradients"] / C.zero_shard_factor(loaded, "gradients") * own)
        state["gather_transient"] = max(whole["forward-backward"].get("buffers", 0) - state["buffers"], 0)
    ckpt = C.recomputes(loaded)
    layers = max(loaded.arch.layers, 1)
    per = C.PipelineTokens(
        layer=C.saved_per_token(loaded)[0] / layers if ckpt else C.activations_per_token(loaded)[1],
        hidden=C.DTYPE_BYTES[loaded.compute_dtype] * loaded.arch.hidden,
        input_saved=ckpt,
        recompute=C.backward_block_per_token(loaded) if ckpt else 0.0,
        head=liger_final_norm(loaded, C.final_norm_per_token(loaded)) + C.torch_pipeline_loss_per_token(loaded),
        head_kept=liger_final_norm(loaded, C.final_norm_per_token(loaded))
        + C.torch_pipeline_loss_kept_per_token(loaded),
    )
    zero = dict.fromkeys(step, 0)  # every component the estimate reports, 0 where the stage has none
    return [
        (st, {k: {**zero, **v} for k, v in C.torch_pipeline_phases(rp, st, state, per).items()}) for st in C.stages(rp)
    ], p


def _torch_pipeline_phases(rp: ResolvedPlan):
    """The busiest pipeline rank's phases (`_torch_pipeline_stages`)."""
    ranks, p = _torch_pipeline_stages(rp)
    totals, phases = max(
        (({k: _allocated(v) for k, v in ph.items()}, ph) for _, ph in ranks), key=lambda t: max(t[0].values())
    )
    fb = phases["forward-backward"]
    per_sample = int((fb.get("activations", 0) + fb.get("logits", 0)) / max(rp.micro_batch, 1))
    return totals, phases, p, per_sample


def _allocated(parts: dict[str, int]) -> int:
    """A phase's allocated bytes: paged optimizer states live outside torch's allocator."""
    return sum(parts.values()) - parts.get("optimizer_paged", 0)


def pipeline_rank_peak(rp: ResolvedPlan, rank: int) -> int:
    """The allocated peak of pipeline rank `rank` (0 the first, pp − 1 the last) of a torch-pipelining plan."""
    ranks, _ = _torch_pipeline_stages(rp)
    pp = max(rp.pipeline_parallel, 1)
    names = ("first",) if rank == 0 else ("last",) if rank == pp - 1 else (f"rank {rank}", "middle")
    for name in names:
        for st, ph in ranks:
            if st.name == name:
                return max(_allocated(v) for v in ph.values())
    raise ValueError(f"no stage of rank {rank} in the plan's pipeline")


def _device_map_phases(rp: ResolvedPlan):
    """One process's model spread over several GPUs (device_map): the busiest GPU's phases, from the whole model's
    on one GPU (components.device_map_phases), and that GPU."""
    one = rp.with_changes(devices_per_process=1)
    _, whole, p, _ = _phases(one)
    # what one block adds to each phase's activations (the saved activations grow with the blocks, a block's
    # transients do not): the whole model against one block fewer
    n = rp.arch.layers
    less = _phases(one.with_changes(arch=rp.arch.model_copy(update={"layers": n - 1})))[1] if n > 1 else {}
    block = {k: whole[k].get("activations", 0) - less.get(k, {}).get("activations", 0) for k in whole}
    loaded = C.as_loaded(rp)
    s = C.shapes(loaded.arch)
    wb = C.DTYPE_BYTES[loaded.weight_dtype]
    phases, gpu = C.device_map_phases(loaded, whole, block, s.embed_params * wb, s.lm_head_params * wb)
    totals = {name: sum(parts.values()) - parts.get("optimizer_paged", 0) for name, parts in phases.items()}
    fb = phases["forward-backward"]
    per_sample = int((fb.get("activations", 0) + fb.get("logits", 0)) / max(rp.micro_batch, 1))
    return totals, phases, p, per_sample, gpu


def _megatron_phases(rp: ResolvedPlan, p: C.Params):
    """Megatron-core runs its own model, schedule and optimizer: the busiest pipeline rank by its formulas
    (components.megatron_step)."""
    phases = {
        name: {"quant_constants": 0, "adapters": 0, "buffers": 0, "optimizer_paged": 0, **parts}
        for name, parts in C.megatron_step(rp).items()
    }
    # the models beside the policy on its GPUs through every phase: a critic (verl's Megatron CriticWorker) and a
    # reward model (verl's Megatron reward worker by the same layout; Megatron-SWIFT loads a Hugging Face one whole)
    beside = {}
    if rp.value_model and "value_model" not in rp.models_apart:
        beside["value_model"] = C.megatron_value_model(rp)
    if rp.reward_model and "reward_model" not in rp.models_apart:
        beside["reward_model"] = C.megatron_reward_weights(rp) if rp.framework == "verl" else C.reward_weights(rp)
    for parts in phases.values():
        parts.update(beside)
    idle_w, idle_o = rp.offload_params_idle, rp.offload_optimizer_idle

    def policy_held(fb: dict[str, int]) -> dict[str, int]:
        """The policy's weights, gradient buffers and optimizer state outside its update, each unless offloaded then
        (verl megatron_workers.py `offload_megatron_model_to_cpu` frees the weight and gradient buffers,
        `offload_megatron_optimizer` the state)."""
        return {
            "weights": 0 if idle_w else fb["weights"],
            "gradients": 0 if idle_w else fb["gradients"],
            "optimizer": 0 if idle_o else fb["optimizer"],
        }

    if rp.generation == "vllm-colocate":
        # the rollout, between two updates: the engine's share beside the policy's weights, gradient buffers and
        # optimizer state, each unless offloaded between updates (verl megatron_workers.py
        # `offload_megatron_model_to_cpu` frees the weight and gradient buffers, `offload_megatron_optimizer` the
        # state), and the reference unless offloaded. An engine that does not sleep keeps its share through the
        # update phases too.
        share = _generation_share(rp)
        if not rp.generation_sleeps:
            for parts in phases.values():
                parts["generation"] = share
        fb = phases["forward-backward"]
        phases["generation"] = {
            **{k: 0 for k in fb},
            **policy_held(fb),
            # Megatron-SWIFT's offload_model takes the reference along (rollout_mixin.py `offload_context`)
            "reference": 0 if idle_w and rp.offload_idle_scope == "rollout" else fb["reference"],
            "generation": share,
            **beside,
        }
    if "value_model" in beside and rp.critic_micro_batch > 0:
        # the critic's own update before the policy's (verl `update_critic`): its activations at its micro-batch, by
        # its layout and recompute, beside the policy's state (Megatron's gradient buffers persist) unless offloaded
        fb = phases["forward-backward"]
        own = C.megatron_step(C.megatron_critic_plan(rp))["forward-backward"]
        phases["critic-update"] = {
            **{k: 0 for k in fb},
            **policy_held(fb),
            "reference": fb["reference"],
            "generation": fb.get("generation", 0),
            **beside,
            "activations": own["activations"],
            "temporaries": own["temporaries"],
        }
    if rp.correction != 1.0:
        for parts in phases.values():
            for k in parts:
                parts[k] = int(parts[k] * rp.correction)
    totals = {name: sum(parts.values()) for name, parts in phases.items()}
    fb = phases["forward-backward"]
    per_sample = int((fb["activations"] + fb["logits"]) / max(rp.micro_batch, 1))
    return totals, phases, p, per_sample


def _other_models(rp: ResolvedPlan, p: C.Params) -> dict[str, int]:
    """Resident models besides the policy: the reference copy, reward and value models, the teacher, vLLM's pool
    (through the whole step unless the engine sleeps while the policy trains: `_generation_share`)."""
    out = {}
    if rp.reference == "copy" and not rp.reference_offloaded and "reference" not in rp.models_apart:
        # an FSDP CPU-offloaded reference keeps its shards in host memory and gathers one unit at a time for its
        # forward, within the gather buffers already counted (verl 0.4.1/0.7.0 fsdp_workers.py: "We force reference
        # policy to use CPUOffload", `CPUOffload(offload_params=True)` for role "ref")
        out["reference"] = C.reference_weights(rp)
    if rp.reward_model and "reward_model" not in rp.models_apart:
        out["reward_model"] = C.reward_weights(rp)
    if rp.value_model and "value_model" not in rp.models_apart:
        out["value_model"] = C.value_model(rp, p)
    if rp.teacher is not None:
        out["teacher"] = C.teacher_weights(rp)
    if not rp.generation_sleeps:
        out["generation"] = _generation_share(rp)
    return out


def _generation_share(rp: ResolvedPlan) -> int:
    """The colocated engine's pre-allocated share of the whole GPU: its weights and KV cache (trl 1.16.0
    grpo_trainer.py: LLM(gpu_memory_utilization=vllm_gpu_memory_utilization)).

    A sleeping engine gives all of it back while the policy trains: vLLM's sleep mode allocates the weights and the
    KV cache from its own pool (tags "weights" and "kv_cache"), and `CuMemAllocator.sleep` unmaps and releases every
    allocation of that pool, level 1 after copying the weights to pinned CPU memory, level 2 without
    (vllm-project/vllm vllm/device_allocator/cumem.py at 010c2112). What stays on the GPU is outside the pool: small
    input buffers and NCCL buffers, and CUDA graphs, which `enforce_eager` turns off and which are not counted
    (resolve/objective.py says so where the engine captures them).
    """
    if rp.generation != "vllm-colocate":
        return 0
    return int(rp.vllm_memory_share * rp.gpu.memory_gib * GIB)


def allocated_peak(rp: ResolvedPlan) -> int:
    totals, _, _, _ = _phases(rp)
    return max(totals.values())


def device_peak(rp: ResolvedPlan) -> int:
    totals, phases, _, _ = _phases(rp)
    name = max(totals, key=totals.get)
    return _on_device(rp, allocator.device_bytes(rp, totals[name], phases[name]), phases[name]["optimizer_paged"])


def _on_device(rp: ResolvedPlan, resident: int, paged: int) -> int:
    """The device level: what torch's allocator holds plus the CUDA context (`resident`), and the paged optimizer
    states as far as they fit beside it. Paged states are unified memory that the driver moves to host memory when
    the GPU is full (bitsandbytes `get_paged`/`prefetch_tensor`, bitsandbytes/functional.py; Dettmers et al. 2023,
    "QLoRA", §3 "Paged Optimizers", arXiv:2305.14314): the part that does not fit is paged out each step, which is
    slow but not an out-of-memory error."""
    usable = usable_bytes(rp.gpu)
    return resident + max(0, min(paged, usable - resident))


def estimate(rp: ResolvedPlan, *, limits: bool = True) -> Estimate:
    totals, phases, p, per_sample = _phases(rp)
    loaded = C.as_loaded(rp)
    phase = max(totals, key=totals.get)
    allocated = totals[phase]
    parts = dict(phases[phase])
    reserved = allocator.reserved_bytes(loaded, allocated, parts)
    context = allocator.context_bytes(rp)
    device = _on_device(rp, reserved + context, parts["optimizer_paged"])
    paged_out = parts["optimizer_paged"] - (device - reserved - context)
    parts["optimizer_paged"] -= paged_out  # the breakdown adds up to what is on the device
    parts["allocator"] = reserved - allocated
    parts["cuda_context"] = context
    components = {k: int(parts.get(k, 0)) for k in COMPONENTS}
    usable = usable_bytes(rp.gpu)
    low, high = allocator.device_range(loaded, allocated, device)
    fits = device <= usable
    max_b = max_s = at_one = None
    if limits:
        max_b = max_micro_batch(rp, usable)
        max_s = max_seq_len(rp, usable)
        if max_b is None:
            one = _phases(rp.with_changes(micro_batch=1))[0]
            at_one = max(one.items(), key=lambda kv: kv[1])
    assumptions = allocator.assumptions(loaded)
    if loaded is not rp:
        assumptions.append(
            f"transformers 5 quantizes only plain nn.Linear modules: {rp.arch.family}'s own linear "
            f"class stays unquantized and prepare_model_for_kbit_training trains it as LoRA over "
            f"{'fp32' if rp.kbit_upcast else '16-bit'} weights"
        )
    if paged_out > 0:
        assumptions.append(
            f"paged optimizer states: {paged_out / GIB:.1f} GiB of them do not fit beside the rest and "
            f"page out to host memory, moving over PCIe every step (slow, not an out-of-memory error)"
        )
    if rp.devices_per_process > 1 and rp.strategy != "megatron":
        assumptions.append(C.device_map_note(rp, _device_map_phases(rp)[4]))
    # Megatron-SWIFT adapts mcore's grouped experts with its own LoRA, not peft's (ms-swift v3.10.0
    # swift/megatron/tuners/lora.py `LoraParallelLinear` over TEGroupedLinear)
    if rp.strategy != "megatron":
        assumptions += C.expert_adapter_notes(rp)
    assumptions += C.dora_version_notes(rp)
    if (ep_note := C.ep_dispatch_note(rp)) is not None:
        assumptions.append(ep_note)
    if C.compiled_block(rp):
        assumptions.append(
            "torch.compile: activations as AOTAutograd's partitioner keeps them (norms, activation "
            "functions and casts recomputed in backward; the loss compiled with the model)"
        )
    return Estimate(
        allocated_bytes=allocated,
        reserved_bytes=reserved,
        device_bytes=device,
        low_bytes=low,
        high_bytes=high,
        components=components,
        phase=phase,
        phases=totals,
        usable_bytes=usable,
        fits=fits,
        headroom_bytes=usable - device,
        max_micro_batch=max_b,
        max_seq_len=max_s,
        peak_at_one=at_one,
        params_total=p.total,
        params_trainable=p.trainable,
        activation_bytes_per_sample=per_sample,
        headroom_fraction=rp.headroom,
        objective=rp.objective,
        throughput=throughput(rp, paged_out_bytes=max(paged_out, 0)),
        calibration=rp.calibration if rp.correction != 1.0 else None,
        assumptions=tuple(assumptions),
        unmodelled=rp.unmodelled,
        approximate=rp.approximate,
    )


def _largest(fits, lo: int, hi: int) -> int | None:
    """Largest n in [lo, hi] with fits(n), assuming monotonic; None when not even lo fits."""
    if not fits(lo):
        return None
    n = lo
    while n < hi and fits(min(n * 2, hi)):
        n = min(n * 2, hi)
    if n == hi:
        return hi
    a, b = n, min(n * 2, hi)  # fits(a), not fits(b)
    while b - a > 1:
        m = (a + b) // 2
        if fits(m):
            a = m
        else:
            b = m
    return a


def max_micro_batch(rp: ResolvedPlan, usable: int, hi: int = 4096) -> int | None:
    return _largest(lambda b: device_peak(rp.with_changes(micro_batch=b)) <= usable, 1, hi)


def max_seq_len(rp: ResolvedPlan, usable: int, hi: int = 1 << 20) -> int | None:
    step = 128
    n = _largest(lambda k: device_peak(rp.with_changes(seq_len=k * step)) <= usable, 1, hi // step)
    return None if n is None else n * step
