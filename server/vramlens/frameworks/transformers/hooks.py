"""transformers: a script that runs TRL's GRPOTrainer under transformers' defaults gets TRL's GRPO defaults
(frameworks/hooks.py `TRL_GRPO`)."""

from vramlens.frameworks.hooks import TRL_GRPO, FrameworkHooks

HOOKS = FrameworkHooks(**TRL_GRPO)
