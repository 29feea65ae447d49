"""TRL: the GRPO defaults are its own (frameworks/hooks.py `TRL_GRPO`), and
- preference configs truncate to `max_length=1024` (trl 1.16.0 trl/trainer/dpo_config.py, and the KTO, ORPO, CPO
  and Reward configs);
- GRPOTrainer's per-device batch holds completions from 0.15 and prompts before (knowledge/versions.py
  `trl_grpo_batch_of_completions`);
- SFTTrainer prepares a k-bit model for its adapters as its version does (knowledge/versions.py `trl_sft_kbit`:
  `prepare_model_for_kbit_training` up to 0.25, none from 0.26 or when FSDP / ZeRO-3 hold the weights).
"""

from vramlens.frameworks.hooks import (
    PREFERENCE_OBJECTIVES,
    TRL_GRPO,
    FrameworkHooks,
    KbitPrep,
    SeqDefault,
)
from vramlens.knowledge import versions


class TrlHooks(FrameworkHooks):
    def seq_len_default(self, objective: str) -> SeqDefault | None:
        if objective in PREFERENCE_OBJECTIVES:
            return SeqDefault(1024, "trl 1.16", "TRL's preference configs truncate to max_length=1024")
        return None

    def batch_of_completions(self, version: str | None, objective: str = "grpo") -> bool:
        # RLOOTrainer's batch holds completions at every release (v0.12.2 trainer/rloo_trainer.py
        # `local_dataloader_batch_size = exact_div(args.local_batch_size, args.rloo_k)`)
        return objective != "grpo" or versions.trl_grpo_batch_of_completions(version)

    def kbit_preparation(
        self, env: dict, *, quant_bits: int | None, peft: str, objective: str, compute: str, sharded: bool
    ) -> KbitPrep | None:
        if not quant_bits or peft == "none" or objective != "sft":
            return None
        prep = versions.trl_sft_kbit(env["trl"].version, bf16=compute == "bf16", sharded=sharded)
        label = f"TRL {env['trl'].version} ({env['trl'].source}) SFTTrainer"
        if prep.upcast:
            note = (
                f"{label}: prepare_model_for_kbit_training puts every weight that is not {quant_bits}-bit "
                f"in fp32{', then the embeddings and LM head back in bf16' if prep.embeddings_16bit else ''}"
            )
        elif not sharded:
            note = f"{label}: no k-bit preparation (from 0.26); the adapters train in bf16"
        else:
            note = f"{label}: sharded k-bit model: no k-bit preparation, 16-bit adapters"
        return KbitPrep(prep.upcast, prep.embeddings_16bit, prep.adapter_fp32, note)


HOOKS = TrlHooks(**TRL_GRPO)
