"""unsloth: its models train under TRL's trainers (frameworks/hooks.py `TRL_GRPO`; unsloth/models/rl.py patches
TRL's GRPOTrainer)."""

from vramlens.frameworks.hooks import TRL_GRPO, FrameworkHooks

HOOKS = FrameworkHooks(**TRL_GRPO)
