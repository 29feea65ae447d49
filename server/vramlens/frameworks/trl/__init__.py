"""TRL (SFTTrainer, DPOTrainer, GRPOTrainer, ...): how its run differs from the generic one (`hooks`)."""
