"""Dump what every release of each training framework requires of the libraries whose version changes a step's memory.

    python scripts/dump_release_requirements.py [FRAMEWORK ...]

For each framework's distribution on PyPI (LLaMA-Factory: `llmtuner` up to 0.7, `llamafactory` after), the releases
are listed with `pip index versions`, and each release's package metadata is read with `pip install --dry-run
--no-deps --report` (the wheel's METADATA, which PyPI serves on its own: nothing is installed or run). A release with
no wheel is downloaded as an sdist (`pip download --no-deps`, which prepares its metadata with the sdist's own
build backend, as the argument dump does) and read from its PKG-INFO or egg-info `requires.txt`. What it requires
of REQUIRED (`Requires-Dist`, the requirements of extras left out) is written to
`server/vramlens/frameworks/release_requirements.json`, one release a line:

    {"frameworks": {"ms-swift": {"packages": ["ms-swift"], "releases": {"3.5.0": {"transformers": "<4.53,>=4.33",
     ...}, ...}, "unread": {"0.1.0": "why"}}}}

A release that requires none of them is listed with `{}`. A rerun gives the same bytes unless PyPI has new releases.
`knowledge.frameworks.release_requires` reads it: a run of ms-swift 3.5.0 is read with the newest transformers that
release allows (< 4.53), whether or not its arguments were dumped.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from vramlens.frameworks.schemas import version_key  # noqa: E402

OUT = ROOT / "server" / "vramlens" / "frameworks" / "release_requirements.json"
REQUIRED = ("transformers", "torch", "peft", "trl", "bitsandbytes", "accelerate", "deepspeed")
# framework → its distributions on PyPI, in the order they were published under
PACKAGES: dict[str, tuple[str, ...]] = {
    "axolotl": ("axolotl",),
    "llamafactory": ("llmtuner", "llamafactory"),
    "ms-swift": ("ms-swift",),
    "nemo-automodel": ("nemo_automodel",),
    "openrlhf": ("openrlhf",),
    "torchtitan": ("torchtitan",),
    "torchtune": ("torchtune",),
    "trl": ("trl",),
    "verl": ("verl",),
}


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=600, check=False
    )


def releases(package: str) -> list[str]:
    """Every release of `package` the index lists (`pip index versions`), oldest first."""
    done = _pip("index", "versions", package)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("Available versions:")), "")
    return sorted((v.strip() for v in line.partition(":")[2].split(",") if v.strip()), key=version_key)


def requires(lines: list[str]) -> dict[str, str]:
    """What `Requires-Dist` lines require of REQUIRED; a requirement that applies only to an extra is left out."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    out: dict[str, str] = {}
    for line in lines:
        try:
            req = Requirement(line.strip())
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        if (
            name in REQUIRED
            and name not in out
            and str(req.specifier)
            and (req.marker is None or "extra" not in str(req.marker))
        ):
            out[name] = str(req.specifier)
    return dict(sorted(out.items()))


def _wheel_metadata(package: str, version: str) -> list[str] | None:
    """The release's wheel's `Requires-Dist`, from the index's metadata (`--report`); None when it has no wheel."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = _pip(
            "install", "--dry-run", "--no-deps", "--ignore-installed", "--only-binary", ":all:", "--quiet",
            "--report", str(report), f"{package}=={version}",
        )  # fmt: skip
        if done.returncode != 0 or not report.exists():
            return None
        installs = json.loads(report.read_text(encoding="utf-8")).get("install") or []
        return list(installs[0]["metadata"].get("requires_dist") or []) if installs else None


def _sdist_metadata(package: str, version: str) -> list[str]:
    """An sdist's PKG-INFO `Requires-Dist`, else its egg-info `requires.txt` before the first `[extra]` section."""
    with tempfile.TemporaryDirectory() as tmp:
        done = _pip("download", "--no-deps", "--no-binary", ":all:", f"{package}=={version}", "-d", tmp)
        archives = sorted(Path(tmp).glob("*.tar.gz")) + sorted(Path(tmp).glob("*.zip"))
        if done.returncode != 0 or not archives:
            raise RuntimeError((done.stderr.strip().splitlines() or ["pip download gave no file"])[-1][:200])
        archive = archives[0]
        if archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as z:
                files = {n: z.read(n) for n in z.namelist() if n.endswith(("/PKG-INFO", ".egg-info/requires.txt"))}
        else:
            with tarfile.open(archive) as t:
                files = {
                    m.name: t.extractfile(m).read()  # type: ignore[union-attr]
                    for m in t.getmembers()
                    if m.isfile() and m.name.endswith(("/PKG-INFO", ".egg-info/requires.txt"))
                }
    dist = [
        ln.split(":", 1)[1]
        for name, data in sorted(files.items())
        if name.endswith("PKG-INFO")
        for ln in data.decode("utf-8", errors="replace").splitlines()
        if ln.startswith("Requires-Dist:")
    ]
    if dist:
        return dist
    for name, data in sorted(files.items()):
        if name.endswith("requires.txt"):
            return [ln for ln in data.decode("utf-8", errors="replace").split("\n[", 1)[0].splitlines() if ln.strip()]
    return []


def dump(framework: str) -> dict:
    out: dict = {"packages": list(PACKAGES[framework]), "releases": {}, "unread": {}}
    for package in PACKAGES[framework]:
        for version in releases(package):
            if version in out["releases"]:
                continue
            try:
                lines = _wheel_metadata(package, version)
                if lines is None:
                    lines = _sdist_metadata(package, version)
            except (RuntimeError, OSError, subprocess.SubprocessError, KeyError, ValueError) as e:
                out["unread"][version] = f"{package} {version}: {e}"
                continue
            out["releases"][version] = requires(lines)
    if not out["unread"]:
        del out["unread"]
    return out


def write(data: dict[str, dict]) -> None:
    parts = []
    for fw in sorted(data):
        entry = data[fw]
        lines = [
            f"{json.dumps(v)}: {json.dumps(r, sort_keys=True)}"
            for v, r in sorted(entry["releases"].items(), key=lambda kv: version_key(kv[0]))
        ]
        head = f'  {json.dumps(fw)}: {{"packages": {json.dumps(entry["packages"])}, "releases": {{\n    '
        tail = "\n  }"
        if entry.get("unread"):
            tail += f', "unread": {json.dumps(entry["unread"], sort_keys=True)}'
        parts.append(head + ",\n    ".join(lines) + tail + "}")
    OUT.write_text('{"frameworks": {\n' + ",\n".join(parts) + "\n}}\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("only", nargs="*", help=f"frameworks (default: all of {', '.join(PACKAGES)})")
    args = ap.parse_args(argv)
    data: dict[str, dict] = json.loads(OUT.read_text(encoding="utf-8"))["frameworks"] if OUT.exists() else {}
    for fw in args.only or PACKAGES:
        if fw not in PACKAGES:
            ap.error(f"unknown framework {fw!r}")
        data[fw] = dump(fw)
        unread = data[fw].get("unread", {})
        print(f"{fw}: {len(data[fw]['releases'])} releases read, {len(unread)} not")
    write(data)
    print(f"-> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
