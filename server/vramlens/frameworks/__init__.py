"""What each training framework defines: its argument schemas at each version (dumped from the framework's own
source by `scripts/dump_framework_schemas.py`), the concepts those arguments map to, and the readers of argument
definitions (dataclasses, argparse, pydantic) that both the dump script and the custom-script reader use."""
