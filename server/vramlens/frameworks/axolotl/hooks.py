"""axolotl: TRL's trainers for RL (frameworks/hooks.py `TRL_GRPO`; axolotl src/axolotl/core/builders/rl.py builds
TRL's GRPOTrainer), and the model loaded in the training dtype: src/axolotl/utils/config/__init__.py
`normalize_config` sets `cfg.torch_dtype` from `bf16`/`fp16`, which the model loader passes as `torch_dtype`."""

from vramlens.frameworks.hooks import TRL_GRPO, FrameworkHooks

HOOKS = FrameworkHooks(loads_in_amp_dtype=True, **TRL_GRPO)
