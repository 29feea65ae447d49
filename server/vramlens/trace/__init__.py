"""Exact mode: trace one training step of a synthetic model under torch fake tensors.

The language server and the CLI never import torch. They talk to a worker subprocess
(`python -m vramlens.trace.worker`) through `vramlens.trace.client.TraceClient`. Inside the worker,
`model` builds a model with the plan's shapes on the `meta` device, `engine` moves it into a
`FakeTensorMode` on the fake "cpu" device and runs one step (`step`) while `tracker` counts live
storage bytes the way the CUDA caching allocator counts `memory_allocated` (docs/memory-model.md).

Modules without torch: `config` (plan → build decisions), `report` (raw trace → estimate-shaped
report), `client`. Modules with torch: `tracker`, `model`, `optim`, `losses`, `step`, `engine`, `worker`.
"""
