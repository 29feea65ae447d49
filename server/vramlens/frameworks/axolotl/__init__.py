"""axolotl (`axolotl train config.yml`): how its run differs from the generic one (`hooks`); its key table (`keys`),
the readers and fixes' writers with logic (`readers`, `writers`), and the dialects the YAML parser registers
(`dialect`)."""
