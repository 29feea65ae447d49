"""GPU hints in comments: the `vramlens:` directive and the GPUs that config authors mention.

A directive is a comment in any format, e.g. `# vramlens: gpu=A100-40GB count=2` (also `//` and
`<!-- -->` comments; `gpu="RTX 4090"`, `gpus=`, `gpu_count=` accepted). It is the file's own
statement of its hardware and wins over everything else in the file.

Without a directive, comments are read for what authors write about their hardware (the
projects' example configs and READMEs, docs/config-sources.md, "GPU names"):
"This config has been tested on an A100 80GB", "on 1x A100", "8xA100
machine", "up to 8k will work on a single H100", "GPU memory: 8 * 78GB" (a measured use: 8 GPUs), and
launch lines in comments (`tune run --nproc_per_node 8 ...`, `torchrun --nproc_per_node=4`). These
only fill what the config leaves unset.
"""

from __future__ import annotations

import re
import shlex

from vramlens.formats.settings import PlanBuilder, to_int
from vramlens.knowledge import gpus
from vramlens.plan import IssueKind, Origin, Severity, Sourced, Span, text_lines
from vramlens.settings import MAX_GPU_COUNT

_DIRECTIVE_KEYS = {"gpu", "count", "gpus", "gpu_count"}
_DIRECTIVE = re.compile(r"(?:#|//|<!--)\s*vramlens\s*:\s*(?P<body>.*?)\s*(?:-->)?\s*$", re.IGNORECASE)

_GPU_MODEL = (
    r"(?:(?:NVIDIA|Tesla|GeForce|AMD\s+Instinct)\s+)?"
    r"(?:GB200|GH200|[ABHL]\d{2,3}[A-Z]?|A\d{4}|T4|V100|L4|L40S?|MI\d{3}X?|"
    r"RTX\s*(?:A?\d{4}|PRO\s*\d{4})(?:\s*Ti)?(?:\s*Ada)?|RTX\s*6000(?:\s*Ada)?)"
)
_GPU_TAIL = r"(?:[\s-]*(?:SXM\d?|PCIe|NVL))?(?:[\s-]*\d{2,3}\s*G(?:i)?B)?(?:[\s-]*(?:SXM\d?|PCIe|NVL))?"
# A GPU named in prose: not a piece of a file name, path or identifier (`mistral-qlora-t4.yaml`, `configs/h100/`,
# `run_a100.sh`), where letters and digits run on across `-`, `_`, `.` or `/`.
_GPU_PHRASE = re.compile(
    r"(?<![\w./\\-])(?:(?P<count>\d{1,4})\s*[x×*]\s*|(?P<single>single|one|a|an)\s+)?"
    r"(?P<gpu>" + _GPU_MODEL + _GPU_TAIL + r")(?![\w]|[-./\\][\w-])"
    r"(?:\s*[x×*]\s*(?P<count2>\d{1,4})(?!\d))?",
    re.IGNORECASE,
)
_MEASURED = re.compile(
    r"GPU\s+memory\s*[:=]\s*(?P<n>\d{1,4})\s*[x×*]\s*(?P<mem>\d+(?:\.\d+)?)\s*G(?:i)?B", re.IGNORECASE
)
# "a preset for 64 H100 GPUs" (torchtitan v0.2.0 torchtitan/models/llama4/train_configs/llama4_17bx16e.toml), "8 GPUs",
# "16 x A100 GPUs": a count of GPUs stated in the config's leading comment block, the GPU named or not
_COUNT_PHRASE = re.compile(
    r"(?<![\w./\\-])(?P<n>\d{1,5})\s*(?:[x×*]\s*)?(?:(?P<gpu>" + _GPU_MODEL + _GPU_TAIL + r")\s*)?GPUs?\b",
    re.IGNORECASE,
)
_NPROC = re.compile(r"--nproc[-_]per[-_]node[=\s]+(?P<n>\d{1,4})")
_NNODES = re.compile(r"--nnodes[=\s]+(?P<n>\d{1,4})")
_NUM_GPUS = re.compile(r"--num[-_]gpus[=\s]+(?P<n>\d{1,4})|--num_processes[=\s]+(?P<m>\d{1,4})")
# Slurm batch directives (https://slurm.schedmd.com/sbatch.html): `#SBATCH` lines before the first command;
# `--gres=gpu[:type]:N` and `--gpus-per-node=[type:]N` are per node, `--gpus=[type:]N` (`-G`) for the job,
# `--gpus-per-task=N` for each of `--ntasks=N` (`-n`), `--nodes=N` (`-N N`); `--ntasks-per-node=N` counts ranks
# when the script starts them with `srun`.
_SBATCH = re.compile(r"^#SBATCH\s+(?P<body>.*)$")
_SBATCH_OPTIONS = {
    "--gres": "gres",
    "--gpus-per-node": "per_node",
    "--gpus": "gpus",
    "-G": "gpus",
    "--nodes": "nodes",
    "-N": "nodes",
    "--ntasks-per-node": "tasks",
    "--gpus-per-task": "per_task",
    "--ntasks": "ntasks",
    "-n": "ntasks",
}


def _lookup(text: str):
    """(canonical name, count, note) for a GPU string, via the knowledge base; None if unknown."""
    m = gpus.lookup_gpu_detail(text)
    return (m.spec.name, m.count, m.note) if m else None


def _span(file: str, line: int, start: int, end: int) -> Span:
    return Span(file=file, start_line=line, start_col=start, end_line=line, end_col=end)


def comments(text: str):
    """(line number, column where the comment starts, comment text) for `#` / `//` comments.

    A `#` counts as a comment at the start of a line or after whitespace (YAML's rule), which also
    covers shell and Python; a `#` inside a quoted value is the rare false positive."""
    for i, line in enumerate(text_lines(text)):
        if "#" not in line and "//" not in line and "<!--" not in line:
            continue
        for m in re.finditer(r"(?:^|(?<=\s))(#|//|<!--)", line):
            yield i, m.start(), line[m.start() :]
            break


def apply_directive(b: PlanBuilder, text: str) -> bool:
    """Read `vramlens: gpu=... count=...` directives; True when one set the GPU."""
    if "vramlens" not in text and "VRAMLENS" not in text.upper():
        return False
    found = False
    file = b.plan.source_file
    for line, col, comment in comments(text):
        m = _DIRECTIVE.match(comment)
        if not m:
            continue
        body = m.group("body")
        span = _span(file, line, col, col + len(comment.rstrip()))
        try:
            words = shlex.split(body, comments=False)
        except ValueError:
            words = body.split()
        fields = {}
        for w in words:
            k, sep, v = w.partition("=")
            if sep:
                fields[k.strip().lower().replace("-", "_")] = v.strip()
        gpu = fields.get("gpu")
        count = fields.get("count") or fields.get("gpus") or fields.get("gpu_count")
        if gpu:
            hit = _lookup(gpu)
            if hit is None:
                hint = next(iter(gpus.suggest_gpu(gpu)), None)
                b.issue(
                    IssueKind.UNKNOWN_VALUE,
                    f"unknown GPU `{gpu}` in the vramlens directive" + (f" — did you mean `{hint}`?" if hint else ""),
                    span=span,
                    suggestion=hint,
                )
            else:
                name, n, note = hit
                b.plan.gpu_name = Sourced(
                    value=name,
                    origin=Origin.FILE,
                    key="vramlens: gpu",
                    span=span,
                    value_span=span,
                    note=note or f"from the directive `gpu={gpu}`",
                )
                if n > 1 and not count:
                    b.plan.gpu_count = Sourced(
                        value=n, origin=Origin.FILE, key="vramlens: gpu", span=span, value_span=span
                    )
                found = True
        unknown = sorted(set(fields) - _DIRECTIVE_KEYS)
        if unknown:
            b.issue(
                IssueKind.NOT_READ,
                f"`{unknown[0]}` is not read from a vramlens directive: it reads `gpu=<name>` "
                f"and `count=<n>` (other settings go in `.vramlens.toml` or the editor's settings)",
                span=span,
            )
        if count:
            n = to_int(count)
            if n is None or not 1 <= n <= MAX_GPU_COUNT:
                b.issue(
                    IssueKind.INVALID_VALUE,
                    f"`count={count}` in the vramlens directive should be a whole number from 1 to {MAX_GPU_COUNT}",
                    span=span,
                )
            else:
                b.plan.gpu_count = Sourced(
                    value=n, origin=Origin.FILE, key="vramlens: count", span=span, value_span=span
                )
                found = True
        if not gpu and not count:
            b.issue(
                IssueKind.INVALID_VALUE,
                "a vramlens directive needs `gpu=<name>` and/or `count=<n>`",
                span=span,
                severity=Severity.INFO,
            )
    return found


def header_comments(text: str):
    """(line, column, comment) of the comment lines a file opens with (blank lines and a `#!` line among them),
    up to its first line of anything else."""
    for i, line in enumerate(text_lines(text)):
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith(("#", "//")):
            return
        yield i, len(line) - len(line.lstrip()), stripped


def apply_header_count(b: PlanBuilder, text: str) -> None:
    """A GPU count the file's leading comments state ("a preset for 64 H100 GPUs"): the GPU count and the run's
    world size, and the GPU when named, where the config does not state them (a world size the reader only
    derived as the least the parallel layout needs gives way to it when it divides it)."""
    plan = b.plan
    if plan.gpu_count is not None and plan.gpu_count.origin != Origin.DERIVED:
        return
    file = plan.source_file
    for line, col, comment in header_comments(text):
        if _DIRECTIVE.match(comment):
            continue
        for m in _COUNT_PHRASE.finditer(comment):
            n = int(m.group("n"))
            if not 1 <= n <= MAX_GPU_COUNT:
                continue
            gpu = m.group("gpu")
            hit = _lookup(gpu) if gpu else None
            if gpu and hit is None:
                continue
            sp = _span(file, line, col + m.start(), col + m.end())
            note = f"from the comment `{m.group(0).strip()}` at the top of the file" + (
                f"; {hit[2]}" if hit and hit[2] else ""
            )
            world = plan.world_size
            if world is not None and world.origin != Origin.DERIVED:
                return
            if world is not None and isinstance(world.value, int) and world.value > 0 and n % world.value:
                return  # not a world size the layout allows
            if hit is not None and plan.gpu_name is None:
                plan.gpu_name = Sourced(
                    value=hit[0], origin=Origin.ASSUMED, key="comment", span=sp, value_span=sp, note=note
                )
            plan.gpu_count = Sourced(value=n, origin=Origin.ASSUMED, key="comment", span=sp, value_span=sp, note=note)
            plan.world_size = Sourced(value=n, origin=Origin.ASSUMED, key="comment", span=sp, value_span=sp, note=note)
            return


def _sbatch_options(text: str) -> dict[str, tuple[str, int]]:
    """The GPU-related `#SBATCH` options of a batch script: option kind -> (value, line). Slurm reads them up to
    the first line that is not a comment or blank."""
    found: dict[str, tuple[str, int]] = {}
    for line, _col, comment in header_comments(text):
        m = _SBATCH.match(comment)
        if not m:
            continue
        try:
            words = shlex.split(m.group("body"), comments=True)
        except ValueError:
            continue
        for i, word in enumerate(words):
            name, sep, value = word.partition("=")
            if not sep and i + 1 < len(words):
                value = words[i + 1]
            kind = _SBATCH_OPTIONS.get(name)
            if kind and value:
                found.setdefault(kind, (value, line))
    return found


def _gpu_spec(value: str) -> tuple[str | None, int | None]:
    """`gpu[:type][:N]` (a `--gres` value; `--gpus` values are given the `gpu:` prefix) -> (type, N); another
    resource than `gpu` gives (None, None)."""
    parts = value.split(",")[0].split("(")[0].split(":")
    if parts[0] != "gpu":
        return None, None
    if len(parts) == 1:
        return None, 1
    return (parts[1] if len(parts) > 2 else None), to_int(parts[-1])


def apply_sbatch(b: PlanBuilder, text: str) -> None:
    """The GPUs a Slurm batch script asks for (`#SBATCH`), where the run itself does not state its GPU count."""
    plan = b.plan
    if "#SBATCH" not in text or (plan.gpu_count is not None and plan.gpu_count.origin != Origin.DERIVED):
        return
    options = _sbatch_options(text)
    nodes = to_int(options["nodes"][0].split("-")[0]) if "nodes" in options else None
    nodes = nodes if nodes and nodes > 0 else 1
    total = gpu_type = None
    key = line = None
    if "gpus" in options:
        value, line = options["gpus"]
        gpu_type, total = _gpu_spec("gpu:" + value)
        key = "--gpus"
    elif "per_task" in options:
        value, line = options["per_task"]
        gpu_type, per_task = _gpu_spec("gpu:" + value)
        tasks = to_int(options["ntasks"][0]) if "ntasks" in options else None
        if tasks is None and "tasks" in options:
            tasks = (to_int(options["tasks"][0]) or 0) * nodes
        total = per_task * (tasks or 1) if per_task else None
        key = "--gpus-per-task" + (" × --ntasks" if tasks else "")
    else:
        for kind, name in (("per_node", "--gpus-per-node"), ("gres", "--gres")):
            if kind in options:
                value, line = options[kind]
                gpu_type, per_node = _gpu_spec(value if kind == "gres" else "gpu:" + value)
                total = per_node * nodes if per_node else None
                key = name
                break
        if total is None and "tasks" in options and re.search(r"(?m)^\s*srun\b", text):
            value, line = options["tasks"]
            per_node = to_int(value)
            total = per_node * nodes if per_node else None
            key = "--ntasks-per-node (one rank per task under srun)"
    if not total or not 1 <= total <= MAX_GPU_COUNT or line is None:
        return
    world = plan.world_size
    if world is not None and world.origin != Origin.DERIVED:
        world = None  # the launcher's own world size stands
    elif world is not None and isinstance(world.value, int) and world.value > 0 and total % world.value:
        return  # not a world size the parallel layout allows
    sp = _span(plan.source_file, line, 0, len(text_lines(text)[line]))
    note = f"from the Slurm directive `#SBATCH {key}`" + (f" on {nodes} nodes" if nodes > 1 else "")
    plan.gpu_count = Sourced(value=total, origin=Origin.FILE, key="#SBATCH", span=sp, value_span=sp, note=note)
    if plan.world_size is None or world is not None:
        plan.world_size = Sourced(value=total, origin=Origin.FILE, key="#SBATCH", span=sp, value_span=sp, note=note)
    hit = _lookup(gpu_type) if gpu_type else None
    if hit is not None and plan.gpu_name is None:
        plan.gpu_name = Sourced(value=hit[0], origin=Origin.FILE, key="#SBATCH", span=sp, value_span=sp, note=note)


def apply_comment_hints(b: PlanBuilder, text: str) -> None:
    """Fill gpu_name / gpu_count from what comments say, when the config itself does not say."""
    plan = b.plan
    apply_sbatch(b, text)
    apply_header_count(b, text)
    if plan.gpu_name is not None and plan.gpu_count is not None:
        return
    file = plan.source_file
    name_hit = count_hit = None
    nproc = nnodes = None
    for line, col, comment in comments(text):
        if _DIRECTIVE.match(comment):
            continue
        if nproc is None and (m := _NPROC.search(comment) or _NUM_GPUS.search(comment)):
            n = int(next(g for g in m.groups() if g))
            nproc = (n, _span(file, line, col + m.start(), col + m.end()), comment.strip())
            if mm := _NNODES.search(comment):
                nnodes = int(mm.group("n"))
        if count_hit is None and (m := _MEASURED.search(comment)):
            count_hit = (
                int(m.group("n")),
                _span(file, line, col + m.start(), col + m.end()),
                f"from the comment `{m.group(0)}` (measured use per GPU × GPUs)",
            )
            continue
        if name_hit is None:
            for m in _GPU_PHRASE.finditer(comment):
                gpu = m.group("gpu")
                count = m.group("count") or m.group("count2")
                hit = _lookup(gpu)
                if hit is None:
                    continue
                n = int(count) if count else 1
                sp = _span(file, line, col + m.start(), col + m.end())
                name_hit = (
                    hit[0],
                    n if (count or m.group("single")) else None,
                    sp,
                    f"from the comment `{m.group(0).strip()}`" + (f"; {hit[2]}" if hit[2] else ""),
                )
                break
    if name_hit is not None and plan.gpu_name is None:
        name, named_count, sp, note = name_hit
        plan.gpu_name = Sourced(value=name, origin=Origin.ASSUMED, key="comment", span=sp, value_span=sp, note=note)
        if named_count is not None and plan.gpu_count is None and nproc is None:
            plan.gpu_count = Sourced(
                value=named_count, origin=Origin.ASSUMED, key="comment", span=sp, value_span=sp, note=note
            )
    if plan.gpu_count is None and nproc is not None:
        n, sp, line_text = nproc
        total = n * (nnodes or 1)
        note = f"from the launch line in a comment: `{line_text.lstrip('#/ ').strip()[:120]}`"
        if nnodes and nnodes > 1:
            note += f" ({n} per node × {nnodes} nodes)"
        plan.gpu_count = Sourced(value=total, origin=Origin.ASSUMED, key="comment", span=sp, value_span=sp, note=note)
    if plan.gpu_count is None and count_hit is not None:
        n, sp, note = count_hit
        plan.gpu_count = Sourced(value=n, origin=Origin.ASSUMED, key="comment", span=sp, value_span=sp, note=note)


def apply_hints(b: PlanBuilder, text: str) -> None:
    """Directive first (it wins), then what comments say for whatever is still unset."""
    apply_directive(b, text)
    apply_comment_hints(b, text)
