"""GPU hints: the `vramlens:` directive in any format, cloud keys, and what comments say about hardware."""

from __future__ import annotations

from vramlens.formats import parse_document
from vramlens.plan import IssueKind

AXO = "base_model: m/x\nmicro_batch_size: 1\nsequence_len: 512\nnum_epochs: 1\n"


def plan_of(text: str, path: str = "/ws/cfg.yaml"):
    p = parse_document(text, path).plan
    assert p is not None
    return p


def test_directive_sets_gpu_and_count_with_its_span():
    p = plan_of("# vramlens: gpu=A100-40GB count=2\n" + AXO)
    assert (p.gpu_name.value, p.gpu_count.value) == ("A100-40GB", 2)
    assert p.gpu_name.origin.value == "file" and p.gpu_name.span.start_line == 0


def test_directive_wins_over_comments_and_accepts_quotes_and_counts_in_the_name():
    p = plan_of("# tested on 1x A10G\n" + AXO + '# vramlens: gpu="8x H100"\n')
    assert p.gpu_name.value.startswith("H100") and p.gpu_count.value == 8


def test_directive_in_json_comments_and_in_other_formats():
    p = plan_of(
        '// vramlens: gpu=L40S\n{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 2}\n',
        "/ws/ds.jsonc",
    )
    assert p.gpu_name.value == "L40S"
    p = plan_of(
        "#!/bin/bash\n# vramlens: gpu=RTX-4090 count=1\ntorchrun --nproc_per_node 2 train.py "
        "--per_device_train_batch_size 4 --model_name_or_path m/x\n",
        "/ws/run.sh",
    )
    assert p.gpu_name.value == "RTX 4090" and p.gpu_count.value == 1


def test_unknown_gpu_in_a_directive_is_reported():
    p = plan_of("# vramlens: gpu=A1000000\n" + AXO)
    assert p.gpu_name is None
    assert any(i.kind == IssueKind.UNKNOWN_VALUE and "unknown GPU" in i.message for i in p.issues)


def test_header_comments_name_the_gpu():
    p = plan_of("# This config has been tested on an A100 80GB.\n" + AXO)
    assert (p.gpu_name.value, p.gpu_count.value) == ("A100-80GB", 1) and p.gpu_name.origin.value == "assumed"
    p = plan_of(AXO.replace("sequence_len: 512", "sequence_len: 4096  # up to 8k will work on a single H100"))
    assert p.gpu_name.value.startswith("H100") and p.gpu_count.value == 1
    p = plan_of("# 1 node of 8X A100 40GB\n" + AXO)
    assert (p.gpu_name.value, p.gpu_count.value) == ("A100-40GB", 8)


def test_measured_memory_comment_gives_the_gpu_count():
    p = plan_of("model_name_or_path: m/x\n\n# GPU memory: 8 * 78GB\nstage: sft\ncutoff_len: 4096\n")
    assert p.gpu_count.value == 8 and p.gpu_name is None


def test_launch_lines_in_comments_give_the_count():
    p = plan_of("# torchrun --nnodes 2 --nproc_per_node=4 train.py\n" + AXO)
    assert p.gpu_count.value == 8


def test_comments_do_not_override_the_config():
    p = plan_of("# tested on 8xA100\ngpu: l40s\ngpu_count: 2\nprovider: modal\nsecrets: []\n")
    assert p.gpu_name.value == "L40S" and p.gpu_count.value == 2


def test_numbers_that_are_not_gpus_are_ignored():
    p = plan_of("# 4096 tokens, 8bit optimizer, lr 3e-4, A-team\n" + AXO)
    assert p.gpu_name is None and p.gpu_count is None
