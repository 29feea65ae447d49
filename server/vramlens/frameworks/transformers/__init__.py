"""transformers (Trainer, TrainingArguments): how its run differs from the generic one (`hooks`)."""
