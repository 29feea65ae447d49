"""The families whose decoder computes gate|up or q|k|v with one linear are those transformers builds so: the lists
the estimator keeps (`estimate.components.common`) are held to the parameter inventories of transformers' own
classes built on `meta` (knowledge/data/inventories.json.gz, scripts/dump_model_inventories.py), so a family added
to transformers with a fused linear is not counted as two or three adapters without a test saying so."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from vramlens.estimate.components.common import (
    HF_C_ATTN_FAMILIES,
    HF_FUSED_GATE_UP,
    HF_ONE_QKV_LINEAR,
    HF_ROPE_QKV,
)

INVENTORIES = Path(__file__).resolve().parents[2] / "server" / "vramlens" / "knowledge" / "data" / "inventories.json.gz"
# a decoder layer's own MLP or attention, not an expert's, a shared block's, an audio or vision encoder's
DECODER_LAYER = re.compile(r"(?:^|\.)layers\.\{i\}\.(?:mlp|self_attn|attn|attention)\.(\w+)\.weight$")
FUSED_QKV_NAMES = {"qkv_proj", "wqkv", "Wqkv", "query_key_value", "c_attn", "W_pack"}
# built by transformers with a fused q|k|v but not decoders vramlens estimates as language models: an encoder
# (ModernBERT), a vision-language model whose language model is Persimmon's (Fuyu: counted as persimmon)
QKV_ELSEWHERE = {
    "modernbert": "an encoder",
    "modernvbert": "an encoder",
    "colmodernvbert": "a retrieval encoder",
    "pe_audio": "an audio encoder",
    "fuyu": "its language model is Persimmon (persimmon is listed)",
    "minimax": "the qkv_proj of its lightning (linear-attention) layers, a mixer not modelled; its softmax layers "
    "have q_proj, k_proj, v_proj",
}
GATE_UP_ELSEWHERE = {"dia": "a text-to-speech encoder-decoder"}


def _decoder_linears() -> dict[str, set[str]]:
    models = json.loads(gzip.decompress(INVENTORIES.read_bytes()))["models"]
    out: dict[str, set[str]] = {}
    for model_type, m in models.items():
        for p in m["params"]:
            hit = DECODER_LAYER.search(p["p"])
            if hit and not any(w in p["p"] for w in ("vision", "visual", "audio")):
                out.setdefault(model_type, set()).add(hit.group(1))
    return out


def test_every_decoder_with_a_fused_gate_up_is_listed():
    fused = {t for t, names in _decoder_linears().items() if "gate_up_proj" in names}
    missing = fused - HF_FUSED_GATE_UP - set(GATE_UP_ELSEWHERE)
    assert fused and not missing, f"fused gate|up not listed in HF_FUSED_GATE_UP: {sorted(missing)}"


def test_every_decoder_with_a_fused_qkv_is_listed():
    listed = HF_C_ATTN_FAMILIES | HF_ONE_QKV_LINEAR | HF_ROPE_QKV
    fused = {t for t, names in _decoder_linears().items() if names & FUSED_QKV_NAMES}
    missing = fused - listed - set(QKV_ELSEWHERE)
    assert fused and not missing, f"fused q|k|v not listed: {sorted(missing)}"
