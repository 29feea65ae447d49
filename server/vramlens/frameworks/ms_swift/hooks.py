"""ms-swift: TRL's GRPOTrainer runs its rollouts, and the mixed precision follows the loaded dtype.

- GRPO: swift/trainers/rlhf_trainer/grpo_trainer.py subclasses TRL's GRPOTrainer (the batch counts completions);
  `max_completion_length: int = 512` (swift/llm/argument/rlhf_args.py, v3.12.6 and v4.6.0 in
  frameworks/schemas/ms-swift). Its `beta` is None there and set by ms-swift itself: its GRPO documentation
  (command-line parameters, GRPO arguments) gives 0.04, with 0 loading no reference model — not TRL's 0.0, so a
  GRPO run keeps its reference model.
- Mixed precision: ms-swift 4.x swift/llm/argument/base_args/model_args.py `_init_mixed_precision`: bf16 weights
  → `bf16=True`, fp16/fp32 weights → `fp16=True` (autocast over the loaded dtype; DeepSpeed keeps fp32 master
  weights).
- Images: ms-swift reads the Qwen-VL pixel budget from `MAX_PIXELS` and the token cap from `IMAGE_MAX_TOKEN_NUM` in
  the environment (qwen-vl-utils 0.0.14 vision_process.py: max_pixels = IMAGE_MAX_TOKEN_NUM × (patch × merge)²).
"""

from collections.abc import Callable
from typing import Any

from vramlens.formats.settings import to_float
from vramlens.frameworks.evaluation import as_ratio, by_generation, eval_strategy, is_off
from vramlens.frameworks.hooks import AmpDefault, DistillLoss, FrameworkHooks
from vramlens.knowledge import versions

# ms-swift splits a validation set off the training data by default before 3.6.0 (`split_dataset_ratio: float =
# 0.01`, swift/llm/argument/base_args/data_args.py at v3.0.0 to v3.5.3; 1.x/2.x `dataset_test_ratio: float = 0.01`,
# swift/llm/utils/argument.py at v1.7.3 and v2.6.1) and none from 3.6.0 (`split_dataset_ratio: float = 0.`,
# data_args.py at v3.6.0 to v4.6.0)
SWIFT_NO_SPLIT_FROM = (3, 6, 0)

# ms-swift's own chunked JSD for GKD over the full logits: from 3.12.0 (commit b3d0d794e "Optimize the peak memory
# usage of the GKD JSD loss": v3.12.0 swift/trainers/rlhf_trainer/gkd_trainer.py `generalized_jsd_loss`, the same in
# v4.0.0 swift/rlhf_trainers/gkd_trainer.py), from 4.3.0 swift/rlhf_trainers/gkd_loss.py `gkd_loss`/`jsd_loss`
# (commit f12344c17); before 3.12.0 TRL's GKDTrainer loss
SWIFT_JSD_FROM = {(3, 12, 0): "swift-jsd-3.12", (4, 3, 0): "swift-jsd-4.3"}
SWIFT_GKD_BETA = 0.5  # v4.0.0 swift/arguments/rlhf_args.py `_set_default`: `rlhf_type == 'gkd'` → beta 0.5


class MsSwiftHooks(FrameworkHooks):
    def amp_from_weights(self, weight_dtype: str) -> AmpDefault | None:
        amp = "bf16" if weight_dtype == "bf16" else "fp16"
        return AmpDefault(amp, f"ms-swift turns torch_dtype {weight_dtype} into `{amp}: true`")

    def evaluates(self, extra: Callable[[str], Any], version: str | None) -> bool:
        """`eval_strategy` follows `save_strategy` when unset (v3.5.0 swift/llm/argument/train_args.py and v4.4.0
        swift/arguments/sft_args.py `_init_eval_strategy`; transformers' default save_strategy is "steps"), and
        evaluation needs a validation set: `--val_dataset`, or a split of the training data (`split_dataset_ratio`,
        1.x/2.x `dataset_test_ratio`; default by version: SWIFT_NO_SPLIT_FROM). Without one the trainer turns
        evaluation off (v4.4.0 swift/trainers/mixin.py: `eval_dataset is None` → `IntervalStrategy.NO`)."""
        strategy = eval_strategy(extra)
        if by_generation(extra):
            return False
        if strategy is None:
            strategy = extra("save_strategy")
        if strategy is not None and is_off(strategy):
            return False
        val_dataset = extra("val_dataset")
        if val_dataset not in (None, "", "[]", "()") and not is_off(val_dataset):
            return True
        stated = extra("split_dataset_ratio")
        if stated is None:
            stated = extra("dataset_test_ratio")
        if stated is not None:
            ratio = as_ratio(stated)
            return ratio is not None and ratio > 0
        parsed = versions.parse(version)
        return parsed is not None and parsed < SWIFT_NO_SPLIT_FROM  # unknown: the newest release's default, no split

    def distill_loss(self, extra: Callable[[str], Any], version: str | None) -> DistillLoss | None:
        """ms-swift's GKD loss with a local teacher over the full vocabulary (`SWIFT_JSD_FROM`; unknown version: the
        newest). Not with `gkd_logits_topk` (the teacher's top-k only) or `teacher_model_server` (an API teacher's
        top-k log-probs), nor under Liger (`use_liger_kernel`: its fused JSD, the plan's fused loss). `beta`: 0.5
        unless set (`SWIFT_GKD_BETA`); `sft_alpha` > 0 adds the student's cross-entropy (`outputs_student.loss`, the
        model's own loss: `model_inputs['labels']` passed to its forward)."""
        if extra("gkd_logits_topk") not in (None, "", "None") or extra("teacher_model_server") not in (None, ""):
            return None
        parsed = versions.parse(version)
        forms = [f for since, f in sorted(SWIFT_JSD_FROM.items()) if parsed is None or parsed >= since]
        if not forms:
            return None
        beta = to_float(extra("beta"))
        sft = to_float(extra("sft_alpha"))
        beta = SWIFT_GKD_BETA if beta is None else beta
        where = "gkd_loss.py `jsd_loss`, 4.3 on" if forms[-1] == "swift-jsd-4.3" else "`generalized_jsd_loss`, 3.12–4.2"
        sft_part = ", + the student's cross-entropy (sft_alpha)" if sft else ""
        note = f"GKD loss: ms-swift's chunked JSD over the full logits (beta {beta:g}{sft_part}; {where})"
        return DistillLoss(forms[-1], beta, bool(sft and sft > 0), note)


HOOKS = MsSwiftHooks(
    image_pixel_env=("MAX_PIXELS",),
    image_token_env=("IMAGE_MAX_TOKEN_NUM",),
    completion_len_default=512,
    completion_len_source="trl 1.16",  # ms-swift's GRPO trainer subclasses TRL's GRPOTrainer
    # "In PPO, GRPO, GKD and inference scenarios, `max_length` refers to `max_prompt_length`" (ms-swift 3602360a
    # docs/source_en/Instruction/Command-line-parameters.md)
    rollout_prompt_from_seq_len=True,
    batch_counts_completions=True,
    # v3.5.0 swift/trainers/sequence_parallel/ulysses.py `loss_scale_sp_func`, v4.0.0 swift/trainers/utils.py
    # `per_token_loss_func_sp`: `CELOSS_PARALLEL_SIZE` chunks the cross-entropy
    sp_loss_16bit=True,
    sp_loss_chunk_env="CELOSS_PARALLEL_SIZE",
)
