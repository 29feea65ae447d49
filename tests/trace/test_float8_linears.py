"""torchao's float8 training linears keep what bf16 linears keep: the estimate counts a float8 step's saved tensors as a
bf16 step's (resolve.assemble `_float8_linears`), because `matmul_with_hp_or_float8_args` saves its high-precision
input and weight and casts them to fp8 again in the backward (torchao 0.17 float8/float8_linear.py). Checked here on
real CPU tensors, counted by the trace's own `LiveBytes`: after the forward, a float8 MLP holds exactly the bytes of
its bf16 twin. Skips where torch or torchao is missing (CI installs the trace extra)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (the trace extra)")
float8 = pytest.importorskip("torchao.float8", reason="torchao not installed (the trace extra)")

from vramlens.trace.tracker import LiveBytes  # noqa: E402


def held_after_forward(fp8: bool, tokens: int = 1024, hidden: int = 256, width: int = 1024) -> int:
    nn = torch.nn
    mlp = nn.Sequential(
        nn.Linear(hidden, width, bias=False, dtype=torch.bfloat16),
        nn.GELU(),
        nn.Linear(width, hidden, bias=False, dtype=torch.bfloat16),
    )
    if fp8:
        float8.convert_to_float8_training(mlp)
        assert type(mlp[0]).__name__ == "Float8Linear"
    x = torch.randn(tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
    with LiveBytes() as live:
        y = mlp(x)
        held = live.cur
        y.float().sum().backward()
    assert x.grad is not None
    return held


@pytest.mark.parametrize("tokens", [512, 2048])
def test_float8_linears_keep_a_bf16_linears_saved_tensors(tokens):
    bf16, fp8 = held_after_forward(False, tokens), held_after_forward(True, tokens)
    # at least the GELU's input and output (the second linear's input), 2 bytes × 1024 wide per token each
    assert bf16 >= tokens * 1024 * 2 * 2
    assert fp8 == bf16


def test_float8_estimate_is_the_bf16_estimate_and_says_what_it_leaves_out(tmp_path):
    from vramlens.analysis import analyze
    from vramlens.settings import Settings

    text = """[model]
name = "llama3"
flavor = "8B"
{converters}
[training]
local_batch_size = 2
seq_len = 4096
[parallelism]
data_parallel_shard_degree = 8
"""
    plain = analyze(text.format(converters=""), str(tmp_path / "a.toml"), Settings(model_lookup=False))
    fp8 = analyze(
        text.format(converters='converters = ["float8"]'), str(tmp_path / "b.toml"), Settings(model_lookup=False)
    )
    assert plain.estimate is not None and fp8.estimate is not None, (plain.error, fp8.error)
    assert fp8.estimate.allocated_bytes == plain.estimate.allocated_bytes
    assert not fp8.plan.unmodelled
    assert any("float8 linears (torchao)" in a for a in fp8.estimate.approximate)
