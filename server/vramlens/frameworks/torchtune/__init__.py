"""torchtune (`tune run` recipes): how its run differs from the generic one (`hooks`)."""
