"""A GPU count stated in a config's leading comment block ("a preset for 64 H100 GPUs") is the run's GPU count
and world size, with the phrase as its source, where the config itself does not state them."""

from pathlib import Path

from vramlens.analysis import analyze
from vramlens.settings import Settings

TITAN = Path(__file__).resolve().parents[1] / "fixtures" / "torchtitan" / "v0.2.0"


def run(path: Path, workspace: Path):
    return analyze(path.read_text(), str(path), Settings(workspace=workspace, model_lookup=False))


def test_torchtitan_preset_header_gives_count_and_gpu():
    """torchtitan v0.2.0 llama4_17bx16e.toml: "# NOTE: this toml config is a preset for 64 H100 GPUs."; its
    data_parallel_shard_degree -1 leaves the world size to the launch."""
    a = run(TITAN / "llama4_17bx16e.toml", TITAN)
    plan = a.plan
    assert plan.gpu_count.value == 64 and plan.world_size.value == 64
    assert plan.gpu_name.value.startswith("H100")
    assert "64 H100 GPUs" in plan.gpu_count.note
    assert plan.gpu_count.span.start_line == 0
    assert a.resolution.sources["world_size"].value == 64
    assert a.estimate is not None


def test_header_count_without_a_gpu_name(tmp_path):
    text = (TITAN / "llama4_17bx16e.toml").read_text().replace("64 H100 GPUs", "16 GPUs")
    p = tmp_path / "job.toml"
    p.write_text(text)
    plan = run(p, tmp_path).plan
    assert plan.gpu_count.value == 16 and plan.world_size.value == 16


def test_a_count_the_layout_cannot_use_is_not_taken(tmp_path):
    """TP 8: 12 GPUs is not a multiple of the 8 the layout needs."""
    text = (TITAN / "llama4_17bx16e.toml").read_text().replace("64 H100 GPUs", "12 H100 GPUs")
    p = tmp_path / "job.toml"
    p.write_text(text)
    plan = run(p, tmp_path).plan
    assert plan.world_size.value == 8


def test_count_in_a_later_comment_is_not_a_header(tmp_path):
    text = (
        (TITAN / "llama4_17bx16e.toml")
        .read_text()
        .replace("# NOTE: this toml config is a preset for 64 H100 GPUs.", "")
    )
    text = text.replace("[job]", "[job]\n# tried on 64 H100 GPUs", 1)
    p = tmp_path / "job.toml"
    p.write_text(text)
    plan = run(p, tmp_path).plan
    assert plan.world_size.value == 8
