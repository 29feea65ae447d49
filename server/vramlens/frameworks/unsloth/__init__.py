"""unsloth (FastLanguageModel + TRL's trainers): how its run differs from the generic one (`hooks`)."""
