"""LLaMA-Factory:
- low-rank optimizers of rank 16: src/llamafactory/hparams/finetuning_args.py (01d87b82) `galore_rank: int = 16`,
  `apollo_rank: int = 16`;
- the adapters' dtype follows the upcast: src/llamafactory/model/adapter.py `init_adapter` casts the trainable
  parameters to fp32 unless `pure_bf16` / `use_badam` (or ZeRO-3/FSDP without quantization), so with the upcast
  off they train in the 16-bit load dtype;
- a rollout's prompt is bounded by `cutoff_len`, the length its dataset processors truncate every example to."""

from vramlens.frameworks.hooks import FrameworkHooks

HOOKS = FrameworkHooks(
    low_rank_default=16,
    adapter_fp32_follows_upcast=True,
    rollout_prompt_from_seq_len=True,
)
