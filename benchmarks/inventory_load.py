"""Time to import `vramlens.knowledge.inventory` and to size a first config from the bundled inventories (each in a
fresh interpreter, so nothing is cached), and the size of the data file.

    python3 benchmarks/inventory_load.py [runs]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from importlib import resources

CODE = """
import time
t0 = time.perf_counter()
from vramlens.knowledge import inventory
t1 = time.perf_counter()
inventory.build({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32}, "llama")
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    imports, first = [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True).stdout.split()
        imports.append(float(out[0]) * 1000)
        first.append(float(out[1]) * 1000)
    data = resources.files("vramlens.knowledge.data")
    sizes = {p.name: p.stat().st_size for p in data.iterdir() if p.name.startswith("inventories")}  # type: ignore[attr-defined]
    print(f"data: {sizes}")
    print(
        f"import: median {statistics.median(imports):.1f} ms; first build (loads the data): median "
        f"{statistics.median(first):.1f} ms over {runs} runs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
