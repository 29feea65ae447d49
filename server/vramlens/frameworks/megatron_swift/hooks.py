"""Megatron-SWIFT's online RL (`megatron rlhf --rlhf_type grpo`), as ms-swift defines it (modelscope/ms-swift
3602360a swift/megatron/arguments/megatron_args.py `MegatronRLHFArguments`):
- `max_completion_length: int = 512`, `num_generations: int = 8`;
- `beta` None → 0.04 for GRPO in `_init_grpo`, so a reference model is kept unless `beta: 0` (the generic rule);
- `micro_batch_size` and `global_batch_size` count completions: `validate_batch_dp_alignment` splits
  `generation_batch_size // num_generations` prompts over the data-parallel ranks and each rank's prompts into
  micro-batches of completions;
- `max_length` bounds the prompt: "In PPO, GRPO, GKD and inference scenarios, `max_length` refers to
  `max_prompt_length`" (docs/source_en/Instruction/Command-line-parameters.md; Megatron-SWIFT takes ms-swift's
  arguments)."""

from vramlens.frameworks.hooks import FrameworkHooks

HOOKS = FrameworkHooks(
    completion_len_default=512,
    completion_len_source="ms-swift Megatron-SWIFT (megatron_args.py)",
    batch_counts_completions=True,
    rollout_prompt_from_seq_len=True,
)
