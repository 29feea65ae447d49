"""Quantization-aware training (torchao fake-quantized linears): what each linear keeps for its backward is
measured from torchao itself (knowledge/qat.py, scripts/measure_qat_saved.py), read from axolotl's `qat:` and
torchtune's QAT `quantizer:`, and counted in the block a step holds; the estimate says it is approximate."""

from __future__ import annotations

from pathlib import Path

import pytest
from scripts_module import load_script
from vramlens.analysis import analyze
from vramlens.estimate import components as C
from vramlens.knowledge import qat
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
AXOLOTL = FIXTURES / "axolotl" / "067b021c" / "3b-qat-fsdp2.yaml"
TORCHTUNE = FIXTURES / "torchtune" / "bd2a0fc7" / "llama2_1B_qat_single_device.yaml"


def run(text: str, name: str, tmp_path: Path):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return analyze(text, str(path), Settings(gpu="H100", model_lookup=False, workspace=tmp_path))


@pytest.mark.parametrize("layout", sorted(qat.SAVED))
def test_saved_bytes_are_what_torchao_keeps(layout):
    """The table's figures are torchao's: a bf16 linear prepared as the framework prepares it keeps exactly these
    bytes for its backward, trained and frozen, at two group sizes."""
    torchao = pytest.importorskip("torchao")
    if torchao.__version__.split("+")[0] != qat.TORCHAO_MEASURED:
        pytest.skip(f"measured with torchao {qat.TORCHAO_MEASURED}; {torchao.__version__} installed")
    script = load_script("measure_qat_saved")
    saved = qat.SAVED[layout]
    for g in (32, 128):
        (w, a), (wf, af) = (script.measure(script.layouts()[layout](g), frozen) for frozen in (False, True))
        assert w == pytest.approx(saved.weight + saved.per_group / g, abs=1e-3)
        assert wf == pytest.approx(saved.weight_frozen, abs=1e-3)
        # a layout without input copies keeps the plain input (2 bytes an element; a frozen weight's nothing)
        per_token = saved.per_token / script.HIDDEN
        assert a == pytest.approx((saved.input or qat.PLAIN_INPUT_BYTES) + per_token, abs=1e-4)
        assert af == pytest.approx(saved.input_frozen + per_token, abs=1e-4)


def test_axolotl_qat_counts_the_fake_quantized_copies_of_the_recomputed_block(tmp_path):
    """axolotl's Llama-3.2-3B QAT example (int8 activations, int4 weights in groups of 32, checkpointed): the block
    being recomputed holds each linear's rounded weight and input copies, 4 bytes per input element of every linear
    (q, k and v one each) where the plain block kept one 16-bit input per group of linears. It was named as not
    modelled and counted as 16-bit training."""
    text = AXOLOTL.read_text(encoding="utf-8")
    with_qat = run(text, "qat.yaml", tmp_path)
    plain = run(text.replace("qat:\n", "qat_off:\n"), "plain.yaml", tmp_path)
    rp = with_qat.resolution.resolved
    assert (rp.qat, rp.qat_group) == ("int8-dynamic-int4", 32)
    assert not [u for u in with_qat.plan.unmodelled if u.key in ("qat", "weight_dtype", "activation_dtype")]
    assert any("torchao 0.17.0" in str(a) for a in with_qat.estimate.approximate)
    a = rp.arch
    tokens = rp.micro_batch * rp.seq_len
    inputs = a.hidden * (3 * 4 - 2) + a.q_dim * (4 - 2) + a.hidden * (2 * 4 - 2) + a.intermediate * (4 - 2)
    linears = a.hidden * (a.q_dim + 2 * a.kv_dim) + a.q_dim * a.hidden + 3 * a.hidden * a.intermediate
    scales = 7 * 4  # each linear's per-token scale and zero point
    assert C.qat_block_bytes(rp, tokens) == int(linears * (4 + 4 / 32) + tokens * (inputs + scales))
    grown = with_qat.estimate.phases["recompute"] - plain.estimate.phases["recompute"]
    assert grown == pytest.approx(C.qat_block_bytes(rp, tokens), rel=0.01)
    assert with_qat.estimate.phases["forward-backward"] == plain.estimate.phases["forward-backward"]


def test_int4_weight_only_and_lora_bases(tmp_path):
    """int4 weights alone (torchao Int4WeightOnlyConfig): 18.125 bytes per trained weight element, the inputs as a
    plain block's; a LoRA base is frozen: only its rounded weight, 2 bytes an element."""
    text = AXOLOTL.read_text(encoding="utf-8").replace("  activation_dtype: int8\n", "")
    full = run(text, "w4.yaml", tmp_path).resolution.resolved
    assert full.qat == "int4-weight"
    a = full.arch
    linears = a.hidden * (a.q_dim + 2 * a.kv_dim) + a.q_dim * a.hidden + 3 * a.hidden * a.intermediate
    assert C.qat_block_bytes(full, 1000) == int(linears * 18.125)
    lora = run(text + "adapter: lora\nlora_r: 16\nlora_target_linear: true\n", "lora.yaml", tmp_path).resolution
    assert C.qat_block_bytes(lora.resolved, 1000) == int(linears * 2.0)


def test_torchtune_qat_quantizer_is_read_and_another_is_named(tmp_path):
    """torchtune's QAT recipe config (`quantizer: Int8DynActInt4WeightQATQuantizer`, groupsize 256) was estimated
    as plain 16-bit training with nothing said; a QAT quantizer whose copies are not measured is named."""
    text = TORCHTUNE.read_text(encoding="utf-8")
    a = run(text, "qat.yaml", tmp_path)
    assert (a.resolution.resolved.qat, a.resolution.resolved.qat_group) == ("8da4w-linear", 256)
    assert any("Int8DynActInt4WeightQATQuantizer" in str(x) for x in a.estimate.approximate)
    other = run(text.replace("Int8DynActInt4WeightQATQuantizer", "Int4WeightOnlyQATQuantizer"), "w4.yaml", tmp_path)
    assert other.resolution.resolved.qat == ""
    assert [u.key for u in other.plan.unmodelled] == ["quantizer._component_"]


def test_a_whole_model_keeps_what_the_blocks_are_counted_for(tmp_path):
    """A small Llama (transformers' own class, 4 layers) with every block linear prepared as each layout prepares it,
    run forward on the CPU: what autograd keeps beyond the plain model's is the counted per-block bytes times the
    layers, trained and frozen, within 3 % (the measured model also keeps one more 16-bit copy of a block input per
    token with a trained activation layout, not counted)."""
    torch = pytest.importorskip("torch")
    torchao = pytest.importorskip("torchao")
    transformers = pytest.importorskip("transformers")
    if torchao.__version__.split("+")[0] != qat.TORCHAO_MEASURED:
        pytest.skip(f"measured with torchao {qat.TORCHAO_MEASURED}; {torchao.__version__} installed")
    script = load_script("measure_qat_saved")
    cfg = transformers.LlamaConfig(
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=1000,
    )
    batch, seq = 2, 128

    def kept(layout: str | None, frozen: bool) -> int:
        torch.manual_seed(0)
        m = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
        if layout is not None:
            prepare = script.layouts()[layout](32)
            for block in m.model.layers:
                for parent in (block.self_attn, block.mlp):
                    for name, child in list(parent.named_children()):
                        if isinstance(child, torch.nn.Linear):
                            setattr(parent, name, prepare(child))
        for p in m.parameters():
            p.requires_grad_(not frozen)
        m.model.embed_tokens.weight.requires_grad_(True)  # a graph through the blocks when they are frozen
        seen: dict[int, int] = {}

        def pack(t):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            m.model(input_ids=torch.randint(0, 1000, (batch, seq)))
        own = {p.untyped_storage().data_ptr() for p in m.parameters()}
        return sum(n for k, n in seen.items() if k not in own)

    base = run(AXOLOTL.read_text(encoding="utf-8"), "tiny.yaml", tmp_path).resolution.resolved
    arch = base.arch.model_copy(
        update=dict(hidden=256, intermediate=768, layers=4, heads=8, kv_heads=2, head_dim=32, vocab=1000)
    )
    for layout in sorted(qat.SAVED):
        for frozen in (False, True):
            rp = base.with_changes(arch=arch, qat=layout, qat_group=32, peft="lora" if frozen else "none")
            counted = 4 * C.qat_block_bytes(rp, batch * seq)
            measured = kept(layout, frozen) - kept(None, frozen)
            assert counted == pytest.approx(measured, rel=0.03), (layout, frozen)


NEMO_QAT = """# automodel llama3_2_1b_squad_qat.yaml --nproc-per-node 8
recipe: TrainFinetuneRecipeForNextTokenPrediction
step_scheduler:
  global_batch_size: 64
  local_batch_size: 8
model:
  _target_: nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained
  pretrained_model_name_or_path: meta-llama/Llama-3.2-1B
qat:
  fake_quant_after_n_steps: 1
  enabled: True
  qat_config:
    _target_: nemo_automodel.components.quantization.qat.QATConfig
    quantizer_type: {kind}
    groupsize: 256
"""


def test_nemo_automodel_qat_is_read(tmp_path):
    """NeMo AutoModel's `qat:` (nemo_automodel/components/quantization/qat.py: torchao's
    Int8DynActInt4WeightQATQuantizer for `int8_dynact_int4weight`) was estimated as plain training with nothing
    said; `int4_weight_only` (torchao's Int4WeightOnlyQATQuantizer, not measured) is named."""
    a = run(NEMO_QAT.format(kind="int8_dynact_int4weight"), "qat.yaml", tmp_path)
    assert (a.resolution.resolved.qat, a.resolution.resolved.qat_group) == ("8da4w-linear", 256)
    off = run(
        NEMO_QAT.format(kind="int8_dynact_int4weight").replace("enabled: True", "enabled: False"), "o.yaml", tmp_path
    )
    assert off.resolution.resolved.qat == "" and a.estimate.device_bytes > off.estimate.device_bytes
    w4 = run(NEMO_QAT.format(kind="int4_weight_only"), "w4.yaml", tmp_path)
    assert w4.resolution.resolved.qat == "" and [u.key for u in w4.plan.unmodelled] == ["qat"]
