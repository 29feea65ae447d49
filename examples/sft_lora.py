"""Supervised fine-tuning of Qwen2.5-1.5B with LoRA on a 16 GB T4 (TRL)."""

# vramlens: gpu=T4
from datasets import load_dataset
from peft import LoraConfig
from trl import SFTConfig, SFTTrainer

model_id = "Qwen/Qwen2.5-1.5B"
seq_len = 1024

training_args = SFTConfig(
    output_dir="out/qwen-sft",
    per_device_train_batch_size=8,
    gradient_accumulation_steps=2,
    max_length=seq_len,
    bf16=True,
    gradient_checkpointing=True,
    optim="adamw_torch",
    learning_rate=2e-4,
    model_init_kwargs={"dtype": "bfloat16"},
)
peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear")

trainer = SFTTrainer(
    model=model_id,
    args=training_args,
    train_dataset=load_dataset("trl-lib/Capybara", split="train"),
    peft_config=peft_config,
)
trainer.train()
