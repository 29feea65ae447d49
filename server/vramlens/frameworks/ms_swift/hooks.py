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

from vramlens.frameworks.evaluation import as_ratio, by_generation, eval_strategy, is_off
from vramlens.frameworks.hooks import AmpDefault, FrameworkHooks
from vramlens.knowledge import versions

# ms-swift splits a validation set off the training data by default before 3.6.0 (`split_dataset_ratio: float =
# 0.01`, swift/llm/argument/base_args/data_args.py at v3.0.0 to v3.5.3; 1.x/2.x `dataset_test_ratio: float = 0.01`,
# swift/llm/utils/argument.py at v1.7.3 and v2.6.1) and none from 3.6.0 (`split_dataset_ratio: float = 0.`,
# data_args.py at v3.6.0 to v4.6.0)
SWIFT_NO_SPLIT_FROM = (3, 6, 0)


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


HOOKS = MsSwiftHooks(
    image_pixel_env=("MAX_PIXELS",),
    image_token_env=("IMAGE_MAX_TOKEN_NUM",),
    completion_len_default=512,
    completion_len_source="trl 1.16",  # ms-swift's GRPO trainer subclasses TRL's GRPOTrainer
    batch_counts_completions=True,
    # v3.5.0 swift/trainers/sequence_parallel/ulysses.py `loss_scale_sp_func`, v4.0.0 swift/trainers/utils.py
    # `per_token_loss_func_sp`: `CELOSS_PARALLEL_SIZE` chunks the cross-entropy
    sp_loss_16bit=True,
    sp_loss_chunk_env="CELOSS_PARALLEL_SIZE",
)
