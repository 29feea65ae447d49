"""`frameworks.argdefs`: argument definitions read with `ast` from real framework code and scripts, and hostile
sources bounded by size, density and depth (never by time)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from vramlens.frameworks.argdefs import MAX_FLAT, MAX_SOURCE_CHARS, SourceRefused, flatten, iter_arguments, read_module

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TRAINING_ARGS = FIXTURES / "transformers" / "v4.40.0" / "training_args.py"
QWEN = FIXTURES / "qwen" / "2df8e8ac" / "finetune.py"
RUN_CLM = FIXTURES / "transformers" / "3c354ea2" / "run_clm_no_trainer.py"


def _by_name(args):
    return {a.name: a for a in args}


def test_transformers_training_arguments():
    module = read_module(TRAINING_ARGS.read_text(encoding="utf-8"), "training_args.py")
    args = _by_name(flatten(module.classes, "TrainingArguments"))
    assert len(args) > 100
    bs = args["per_device_train_batch_size"]
    assert (bs.type, bs.default, bs.required) == ("int", 8, False)
    assert bs.help.startswith("Batch size per GPU")
    assert (args["gradient_checkpointing"].type, args["gradient_checkpointing"].default) == ("bool", False)
    optim = args["optim"]  # Union[OptimizerNames, str]: the module's enum gives the choices
    assert optim.type == "enum" and "adamw_torch" in optim.choices and "paged_adamw_8bit" in optim.choices
    # `optim = field(default=default_optim)`: the class body binds `default_optim = "adamw_torch"` (4.40 has no
    # condition on it; 4.54 adds `if is_torch_greater_or_equal_than_2_8: default_optim = "adamw_torch_fused"`)
    assert (optim.default, optim.default_text, optim.default_when) == ("adamw_torch", None, ())
    assert args["fsdp"].type == "str" and args["fsdp"].default == ""  # Union[List[FSDPOption], str] = ""
    assert args["deepspeed"].type == "dict" and args["deepspeed"].default is None
    assert "adamw_torch" in module.enums["OptimizerNames"]


def test_qwen_finetune_dataclasses():
    module = read_module(QWEN.read_text(encoding="utf-8"), "finetune.py")
    assert module.hf_parsers == [("ModelArguments", "DataArguments", "TrainingArguments", "LoraArguments")]
    assert module.classes["TrainingArguments"].bases == ("transformers.TrainingArguments",)
    args = _by_name(iter_arguments(module))
    assert args["model_name_or_path"].default == "Qwen/Qwen-7B" and args["model_name_or_path"].type == "str"
    assert args["lora_target_modules"].default == ["c_attn", "c_proj", "w1", "w2"]
    assert args["lora_target_modules"].type == "list"
    assert (args["model_max_length"].default, args["model_max_length"].line) == (8192, 44)
    assert args["model_max_length"].help.startswith("Maximum sequence length")
    assert (args["q_lora"].type, args["q_lora"].default, args["use_lora"].default) == ("bool", False, False)
    assert args["lora_dropout"].default == 0.05
    assert module.config_reads == []  # `config.use_cache = False` sets a model config, reads nothing


def test_run_clm_no_trainer_argparse():
    module = read_module(RUN_CLM.read_text(encoding="utf-8"), "run_clm_no_trainer.py")
    args = _by_name(module.parsers)
    assert args["model_name_or_path"].required is True and args["model_name_or_path"].default is None
    assert (args["config_name"].type, args["config_name"].default) == ("str", None)
    assert (args["per_device_train_batch_size"].type, args["per_device_train_batch_size"].default) == ("int", 8)
    assert (args["use_slow_tokenizer"].type, args["use_slow_tokenizer"].default) == ("bool", False)
    assert args["lr_scheduler_type"].choices[:2] == ("linear", "cosine")
    assert args["model_type"].default_text is None and args["model_type"].choices is None  # choices=MODEL_TYPES
    assert args["validation_split_percentage"].type == "int"  # no type=: from the default
    assert all(a.owner == "parser" for a in module.parsers)


ARGPARSE = """
import argparse
parser = argparse.ArgumentParser()
group = parser.add_argument_group("lora")
sub = parser.add_subparsers().add_parser("train")
group.add_argument("--lora-r", "--lora_rank", "-r", dest="lora_r", type=int, default=16)
group.add_argument("--no-flash", dest="flash", action="store_false", help="turn " "off")
sub.add_argument("--targets", nargs="+", default=["q_proj", "v_proj"])
sub.add_argument("--tag", action="append")
parser.add_argument("--checkpointing", action=argparse.BooleanOptionalAction, default=True)
parser.add_argument("--precision", choices=["bf16", "fp16"], default="bf16")
parser.add_argument("--seq", type=int, default=SEQ)
parser.add_argument("data")
parser.set_defaults(seq=4096, extra=3)
"""


def test_argparse_variants():
    args = _by_name(read_module(ARGPARSE).parsers)
    r = args["lora_r"]
    assert (r.type, r.default, r.owner) == ("int", 16, "group")
    assert set(r.aliases) == {"lora-r", "lora_rank", "r"}
    assert (args["flash"].type, args["flash"].default, args["flash"].help) == ("bool", True, "turn off")
    assert (args["targets"].type, args["targets"].default, args["targets"].owner) == (
        "list",
        ["q_proj", "v_proj"],
        "sub",
    )
    assert args["tag"].type == "list"
    assert args["checkpointing"].type == "bool" and "no-checkpointing" in args["checkpointing"].aliases
    assert (args["precision"].type, args["precision"].choices) == ("enum", ("bf16", "fp16"))
    assert (args["seq"].default, args["seq"].default_text) == (4096, None)  # set_defaults wins
    assert args["extra"].default == 3
    assert args["data"].required is True


PYDANTIC = """
from typing import Literal, Optional
from pydantic import BaseModel, Field

class LoraConfig(BaseModel):
    rank: int = Field(8, description="LoRA rank")
    targets: list[str] = Field(default_factory=lambda: ["q_proj"])

class Base(BaseModel):
    micro_batch_size: Optional[int] = Field(default=1, alias="batch")
    adapter: Literal["lora", "qlora"] | None = None

class Config(Base):
    micro_batch_size: int = 2
    base_model: str
    lora: "LoraConfig" = None
"""


def test_pydantic_models_with_inheritance_and_nesting():
    module = read_module(PYDANTIC)
    assert module.classes["Config"].kind == "pydantic"  # a subclass of a model of this module
    args = _by_name(flatten(module.classes, "Config"))
    assert list(args) == ["micro_batch_size", "adapter", "base_model", "lora.rank", "lora.targets"]
    assert (args["micro_batch_size"].default, args["micro_batch_size"].owner) == (2, "Config")
    assert args["adapter"].type == "enum" and args["adapter"].choices == ("lora", "qlora")
    assert args["base_model"].required is True
    assert (args["lora.rank"].default, args["lora.rank"].help) == (8, "LoRA rank")
    assert args["lora.targets"].default == ["q_proj"]
    base = _by_name(flatten(module.classes, "Base"))
    assert base["micro_batch_size"].aliases == ("batch",)


DATACLASS_VARIANTS = '''
import dataclasses
from dataclasses import field
from typing import ClassVar, Optional, Union

@dataclasses.dataclass(frozen=True)
class Model:
    name: str = "meta-llama/Llama-3.1-8B"
    """the model to train"""
    dtype: Union[str, None] = "bf16"
    registry: ClassVar[dict] = {}

@dataclasses.dataclass
class Job:
    model: Model = field(default_factory=Model)
    steps: int = field(default=10, metadata={"help": "steps", "aliases": ["--max-steps"]})
    compile: "Optional[bool]" = None
'''


def test_dataclass_variants():
    module = read_module(DATACLASS_VARIANTS)
    args = _by_name(flatten(module.classes, "Job"))
    assert list(args) == ["model.name", "model.dtype", "steps", "compile"]
    assert args["model.name"].help == "the model to train"  # a docstring after the field
    assert args["model.dtype"].type == "str"
    assert args["steps"].aliases == ("max-steps",)
    assert args["compile"].type == "bool"


TORCHTUNE_RECIPE = """
from omegaconf import DictConfig
from torchtune import config

class Recipe:
    def setup(self, cfg: DictConfig) -> None:
        self._compile = cfg.get("compile", False)
        self._ac = cfg.get("enable_activation_checkpointing", True)
        self._model = config.instantiate(cfg.model)
        self._dir = cfg.checkpointer.checkpoint_dir
        self._lr = cfg.optimizer.get("lr", 2e-5)
        self._bs = cfg["batch_size"]
"""


def test_torchtune_config_reads():
    reads = _by_name(read_module(TORCHTUNE_RECIPE).config_reads)
    assert set(reads) == {
        "compile",
        "enable_activation_checkpointing",
        "model",
        "checkpointer.checkpoint_dir",
        "optimizer.lr",
        "batch_size",
    }
    assert (reads["compile"].default, reads["compile"].type, reads["compile"].required) == (False, "bool", False)
    assert reads["optimizer.lr"].default == 2e-5
    assert reads["model"].required is True
    assert "instantiate" not in reads  # torchtune's `config` module is imported, not a config


# --- hostile sources ---------------------------------------------------------------------------------------


def test_refuses_sources_over_the_bound():
    with pytest.raises(SourceRefused, match="characters"):
        read_module("x = 1\n" * (MAX_SOURCE_CHARS // 6 + 1))
    with pytest.raises(SourceRefused, match="braces"):
        read_module("x = f'" + "{x}" * 30_000 + "'\n")
    with pytest.raises(SourceRefused, match="not Python"):
        read_module("def (:\n")


@pytest.mark.parametrize(
    "source",
    [
        "x: int = " + "-" * 500_000 + "1\n",  # a unary chain deeper than the parser goes
        "y = cfg" + ".a" * 400_000 + "\n",  # an attribute chain
        "x: int = " + "(" * 150 + "1" + ")" * 150 + "\n",  # nesting the parser accepts
    ],
    ids=["unary", "attributes", "parentheses"],
)
def test_deep_expressions_are_refused_or_read(source):
    try:
        module = read_module(source)
    except SourceRefused:
        return
    assert isinstance(module.classes, dict)


def test_inheritance_and_nesting_cycles_end():
    source = textwrap.dedent("""
        from dataclasses import dataclass
        @dataclass
        class A(B):
            b: "B" = None
            x: int = 1
        @dataclass
        class B(A):
            a: A = None
            y: int = 2
    """)
    module = read_module(source)
    for root in ("A", "B"):
        names = [a.name for a in flatten(module.classes, root)]
        assert len(names) == len(set(names)) and len(names) <= 8  # each class expanded once per path


def test_nested_classes_that_multiply_are_bounded_by_count():
    # 14 levels of 300 fields, each typed by the next level: 300^14 dotted names if expanded
    source = "from dataclasses import dataclass\n" + "".join(
        f"@dataclass\nclass C{i}:\n" + "".join(f"    f{j}: C{i + 1} = None\n" for j in range(300)) for i in range(14)
    )
    module = read_module(source)
    assert len(flatten(module.classes, "C0")) <= MAX_FLAT
    assert len(list(iter_arguments(module))) <= MAX_FLAT


def test_many_arguments_and_set_defaults_are_read_once_each():
    n = 5_000
    source = "import argparse\np = argparse.ArgumentParser()\n" + "".join(
        f"p.add_argument('--a{i}', type=int, default={i}); p.set_defaults(a{i}={i + 1})\n" for i in range(n)
    )
    parsers = read_module(source).parsers
    assert len(parsers) == n and parsers[-1].default == n


def test_long_help_is_capped():
    source = "import argparse\np = argparse.ArgumentParser()\np.add_argument('--a', help='" + "h" * 10_000 + "')\n"
    (arg,) = read_module(source).parsers
    assert len(arg.help) == 300
