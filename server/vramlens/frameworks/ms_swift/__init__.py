"""ms-swift (`swift sft|pt|rlhf`): how its run differs from the generic one (`hooks`)."""
