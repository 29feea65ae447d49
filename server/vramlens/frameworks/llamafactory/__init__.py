"""LLaMA-Factory (`llamafactory-cli train`): how its run differs from the generic one (`hooks`); its key tables
(`keys`: the classic hparams and the v1 layout), the readers and fixes' writers with logic (`readers`, `writers`),
and the dialects the YAML parser registers (`dialect`)."""
