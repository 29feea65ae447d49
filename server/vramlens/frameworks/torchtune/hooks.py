"""torchtune: it builds its own models from the recipe's builder.

- The builder's `max_seq_len` sizes the RoPE positions (torchtune 0.6.1 models/*/_model_builders.py pass
  `max_seq_len` to the RoPE module), read as `torchtune_max_seq_len` by formats/torchtune.py.
- RoPE caches: LoRA builders give each layer its own RoPE module except Llama 3.1–3.3's
  (knowledge/frameworks.py `torchtune_rope_caches`).
- A rollout's prompt is bounded by the tokenizer's `max_seq_len`, which truncates every tokenized example.
"""

from typing import Any

from vramlens.frameworks.hooks import FrameworkHooks
from vramlens.knowledge import frameworks


class TorchtuneHooks(FrameworkHooks):
    def builder_arch(self, arch, extra: dict[str, Any]):
        said = extra.get("torchtune_max_seq_len")
        positions = None if said is None else said.value
        if isinstance(positions, int) and arch.max_position != positions:
            return arch.model_copy(update={"max_position": positions})
        return arch

    def rope_caches(self, builder: Any, family: str, peft: str, layers: int) -> int:
        return frameworks.torchtune_rope_caches(builder, family, peft, layers)


# torchtune's PPO and GRPO recipes (recipes/ppo_full_finetune_single_device.py, dev/grpo_full_finetune_distributed.py)
# train the full policy: there is no adapter variant of them
HOOKS = TorchtuneHooks(rollout_prompt_from_seq_len=True, rl_full_only=True)
