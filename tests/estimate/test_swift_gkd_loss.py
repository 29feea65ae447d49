"""ms-swift's GKD loss over the full logits: which form a run gets (its version, `beta`, `sft_alpha`), and the bytes
`logits.swift_gkd_bytes` counts, checked against LiveBytes over ms-swift's own code on 16-bit CPU tensors
(tests/fixtures/ms-swift: v4.0.0 `generalized_jsd_loss` with `compute_loss`'s masking, main's gkd_loss.py)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_megatron_layouts import ADAM, H100, gpt
from vramlens.analysis import analyze
from vramlens.estimate.components.logits import swift_gkd_bytes
from vramlens.resolved import ResolvedPlan
from vramlens.settings import Settings
from vramlens.trace.tracker import LiveBytes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ms-swift"
THINK_MODEL = FIXTURES / "v4.0.0" / "gkd" / "think_model.sh"


def resolved(text: str, tmp_path: Path, version: str) -> ResolvedPlan:
    path = tmp_path / "run.sh"
    path.write_text(text)
    a = analyze(
        text, str(path), Settings(workspace=tmp_path, model_lookup=False, framework_versions={"ms-swift": version})
    )
    assert a.resolution is not None, a.error
    return a.resolution.resolved


@pytest.mark.parametrize(
    "version, form", [("4.0.0", "swift-jsd-3.12"), ("3.12.0", "swift-jsd-3.12"), ("4.6.0", "swift-jsd-4.3")]
)
def test_think_model_example_reads_the_chunked_jsd_with_its_sft_loss(tmp_path, version, form):
    rp = resolved(THINK_MODEL.read_text(), tmp_path, version)
    assert (rp.objective, rp.distill_loss, rp.distill_beta, rp.distill_sft) == ("gkd", form, 0.5, True)


def test_before_3_12_and_with_a_top_k_teacher_the_loss_is_not_ms_swifts_full_vocabulary_jsd(tmp_path):
    text = THINK_MODEL.read_text()
    assert resolved(text, tmp_path, "3.11.0").distill_loss == ""
    topk = text.replace("    --lmbda 0", "    --lmbda 0 \\\n    --gkd_logits_topk 64")
    assert resolved(topk, tmp_path, "4.0.0").distill_loss == ""
    beta = text.replace("    --lmbda 0", "    --lmbda 0 \\\n    --beta 0")
    rp = resolved(beta, tmp_path, "4.0.0")
    assert (rp.distill_beta, rp.distill_sft) == (0.0, True)


# --- the traced loss -------------------------------------------------------------------------------------------


def _v4_0_0_loss():
    src = (FIXTURES / "v4.0.0" / "gkd" / "generalized_jsd_loss.py.txt").read_text()
    src = "\n".join(line[4:] for line in src.splitlines()).replace("@staticmethod\n", "")
    ns: dict = {"torch": torch, "F": F}
    exec(src, ns)  # noqa: S102 — ms-swift's own function, copied unchanged
    jsd = ns["generalized_jsd_loss"]

    def loss(logits_s, logits_t, shifted, beta, temperature):
        # v4.0.0 swift/rlhf_trainers/gkd_trainer.py `compute_loss`, full-vocabulary mode
        mask = shifted != -100
        s, t = logits_s[mask][None], logits_t[mask][None]
        return jsd(student_logits=s, teacher_logits=t, beta=beta, temperature=temperature)

    return loss


def _main_loss():
    mod = types.ModuleType("ms_swift_gkd_loss")
    sys.modules[mod.__name__] = mod  # its dataclasses look their module up
    exec((FIXTURES / "main-3602360a" / "gkd" / "gkd_loss.py.txt").read_text(), mod.__dict__)  # noqa: S102

    def loss(logits_s, logits_t, shifted, beta, temperature):
        # main swift/rlhf_trainers/gkd_trainer.py `_compute_jsd_loss`
        out = mod.TeacherOutput(full_logits=logits_t, labels=shifted.clone())
        total, n = mod.gkd_loss(logits_s, out, shifted, beta, temperature)
        return total / n

    return loss


def traced_peak(loss_fn, tokens: int, vocab: int, beta: float, sft: bool) -> int:
    """Bytes the head and the loss add at the peak of the loss's forward: the student's 16-bit logits (with the
    model's own cross-entropy when `sft`), the teacher's under no_grad, then ms-swift's loss."""
    torch.manual_seed(0)
    hs = torch.randn(1, tokens, 32, dtype=torch.bfloat16, requires_grad=True)
    ht = torch.randn(1, tokens, 32, dtype=torch.bfloat16)
    w = torch.randn(vocab, 32, dtype=torch.bfloat16)
    labels = torch.randint(0, vocab, (1, tokens))
    labels[0, 0] = -100
    live = LiveBytes()
    with live:
        live.reset_peak()
        base = live.cur
        logits_s = hs @ w.t()
        if sft:  # transformers 5.24 loss/loss_utils.py ForCausalLMLoss
            up = logits_s.float()
            shift = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous().view(-1)
            ce = F.cross_entropy(up.view(-1, vocab), shift, ignore_index=-100, reduction="sum")
            del up
        with torch.no_grad():
            logits_t = ht @ w.t()
        shifted = torch.roll(labels, shifts=-1, dims=1)
        out = loss_fn(logits_s, logits_t, shifted, beta, 0.9)
        if sft:
            out = out + 0.1 * ce
    return live.peak - base


@pytest.mark.parametrize("form, loss", [("swift-jsd-3.12", _v4_0_0_loss), ("swift-jsd-4.3", _main_loss)])
@pytest.mark.parametrize("beta", [0.5, 0.0, 1.0])
@pytest.mark.parametrize("sft", [False, True])
def test_counted_bytes_are_the_traced_peak_of_ms_swifts_loss(form, loss, beta, sft):
    tokens, vocab = 1536, 2048
    arch = gpt(vocab=vocab)
    rp = ResolvedPlan(
        arch=arch,
        teacher=arch,
        gpu=H100,
        optimizer=ADAM,
        distill_loss=form,
        distill_beta=beta,
        distill_sft=sft,
    )
    counted = swift_gkd_bytes(rp, tokens)
    assert counted is not None
    # per token the trace also holds the labels, masks and fp32 row statistics (~0.1 byte per logit here, none of
    # them a logit-sized tensor)
    assert sum(counted) == pytest.approx(traced_peak(loss(), tokens, vocab, beta, sft), rel=0.03)
