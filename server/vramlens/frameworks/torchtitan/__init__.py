"""torchtitan's run quirks (hooks.py); its job config is read by formats/torchtitan.py."""
