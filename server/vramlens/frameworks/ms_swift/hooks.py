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

from vramlens.frameworks.hooks import AmpDefault, FrameworkHooks


class MsSwiftHooks(FrameworkHooks):
    def amp_from_weights(self, weight_dtype: str) -> AmpDefault | None:
        amp = "bf16" if weight_dtype == "bf16" else "fp16"
        return AmpDefault(amp, f"ms-swift turns torch_dtype {weight_dtype} into `{amp}: true`")


HOOKS = MsSwiftHooks(
    image_pixel_env=("MAX_PIXELS",),
    image_token_env=("IMAGE_MAX_TOKEN_NUM",),
    completion_len_default=512,
    completion_len_source="trl 1.16",  # ms-swift's GRPO trainer subclasses TRL's GRPOTrainer
    batch_counts_completions=True,
)
