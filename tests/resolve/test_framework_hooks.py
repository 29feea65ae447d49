"""Each framework quirk the resolver applies comes from that framework's hooks (`vramlens.frameworks.<name>.hooks`):
the value a user sees for a small config of the framework, and the generic value the same settings get under a
framework without the quirk (a plain PyTorch loop, `custom`)."""

from __future__ import annotations

import ast
from pathlib import Path

from vramlens.formats import parse_document
from vramlens.frameworks.hooks import FrameworkHooks, hooks_for
from vramlens.knowledge import frameworks
from vramlens.resolve import Resolution, Settings, resolve

RESOLVE = Path(__file__).resolve().parents[2] / "server" / "vramlens" / "resolve"


def resolved(tmp_path: Path, text: str, name: str, framework: str | None = None, **settings) -> Resolution:
    """The resolution of a config file as read, or as if `framework` ran the same settings."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    plan = parse_document(text, str(path), workspace=tmp_path).plan
    assert plan is not None, name
    if framework is not None:
        plan = plan.model_copy(update={"framework": framework})
    return resolve(plan, Settings(model_lookup=False, gpu="H100-80GB", **settings))


def test_every_framework_key_has_hooks_of_its_own_key():
    for key in frameworks.DEFAULTS:
        assert hooks_for(key).key == key
    assert hooks_for("no-such-framework").key == "transformers"  # as `frameworks.defaults_for` falls back


def test_every_hooks_module_is_the_folder_of_a_framework_key():
    """A `frameworks/<name>/hooks.py` is found only through its key in `knowledge.frameworks.DEFAULTS`."""
    folders = {p.parent.name for p in (RESOLVE.parent / "frameworks").glob("*/hooks.py")}
    keys = {k.replace("-", "_") for k in frameworks.DEFAULTS}
    assert folders and folders <= keys, folders - keys
    for key in frameworks.DEFAULTS:
        if key.replace("-", "_") in folders:
            assert type(hooks_for(key)) is not FrameworkHooks or hooks_for(key) != FrameworkHooks(key=key), key


# --- optimizer and precision ---------------------------------------------------------------------------------

SWIFT_SFT = """swift sft \\
    --model Qwen/Qwen2.5-0.5B \\
    --train_type full \\
    --torch_dtype {dtype} \\
    --optim adamw_torch \\
    --per_device_train_batch_size 1 \\
    --max_length 512
"""


LLAMAFACTORY_GALORE = """model_name_or_path: Qwen/Qwen2.5-0.5B
stage: sft
do_train: true
finetuning_type: full
use_galore: true
per_device_train_batch_size: 1
cutoff_len: 512
bf16: true
"""


def test_llamafactory_galore_rank_defaults_to_16(tmp_path):
    """LLaMA-Factory hparams/finetuning_args.py `galore_rank: int = 16`; transformers' GaLore rank is 128."""
    res = resolved(tmp_path, LLAMAFACTORY_GALORE, "a.yaml")
    assert res.resolved.optimizer.low_rank and res.resolved.low_rank == 16
    assert resolved(tmp_path, LLAMAFACTORY_GALORE, "b.yaml", "transformers").resolved.low_rank == 128


# --- precision -------------------------------------------------------------------------------------------------


def test_ms_swift_turns_on_mixed_precision_from_the_loaded_dtype(tmp_path):
    """ms-swift `_init_mixed_precision`: fp32 weights → `fp16: true`, an fp16 autocast over fp32 weights."""
    res = resolved(tmp_path, SWIFT_SFT.format(dtype="float32"), "a.sh")
    assert res.resolved.weight_dtype == "fp32" and res.resolved.amp and res.resolved.compute_dtype == "fp16"
    assert res.sources["amp_dtype"].value == "fp16" and "ms-swift" in (res.sources["amp_dtype"].note or "")
    plain = resolved(tmp_path, SWIFT_SFT.format(dtype="float32"), "b.sh", "custom").resolved
    assert not plain.amp and plain.compute_dtype == "fp32"


AXOLOTL_FP16 = """base_model: Qwen/Qwen2.5-0.5B
datasets:
  - path: tatsu-lab/alpaca
    type: alpaca
sequence_len: 512
micro_batch_size: 1
fp16: true
"""


def test_axolotl_loads_the_model_in_its_training_dtype(tmp_path):
    res = resolved(tmp_path, AXOLOTL_FP16, "a.yaml")
    assert res.resolved.framework == "axolotl" and res.resolved.weight_dtype == "fp16"
    assert resolved(tmp_path, AXOLOTL_FP16, "b.yaml", "transformers").resolved.weight_dtype == "bf16"  # as stored


LLAMAFACTORY_LORA = """model_name_or_path: Qwen/Qwen2.5-0.5B
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
per_device_train_batch_size: 1
cutoff_len: 512
bf16: true
{extra}"""


def test_llamafactory_pure_bf16_trains_16_bit_adapters(tmp_path):
    """LLaMA-Factory adapter.py `init_adapter`: the trainable parameters are upcast to fp32 unless `pure_bf16`."""
    assert resolved(tmp_path, LLAMAFACTORY_LORA.format(extra=""), "a.yaml").resolved.adapter_fp32
    pure = resolved(tmp_path, LLAMAFACTORY_LORA.format(extra="pure_bf16: true\n"), "b.yaml").resolved
    assert not pure.adapter_fp32
    # the same setting under a framework without it: adapters in fp32 as that framework keeps them
    assert resolved(
        tmp_path, LLAMAFACTORY_LORA.format(extra="pure_bf16: true\n"), "c.yaml", "axolotl"
    ).resolved.adapter_fp32


TRL_QLORA = """# trl sft --config sft.yaml
model_name_or_path: Qwen/Qwen2.5-0.5B
load_in_4bit: true
use_peft: true
lora_r: 16
per_device_train_batch_size: 1
max_length: 512
bf16: true
output_dir: out
"""


def test_trl_sft_prepares_a_kbit_model_as_its_version_does(tmp_path):
    old = resolved(tmp_path, TRL_QLORA, "a.yaml", framework_versions={"trl": "0.20.0"})
    assert old.resolved.framework == "trl" and old.resolved.quant_bits == 4
    assert old.resolved.kbit_upcast and old.resolved.adapter_fp32
    assert any("prepare_model_for_kbit_training" in a for a in old.assumptions)
    new = resolved(tmp_path, TRL_QLORA, "b.yaml", framework_versions={"trl": "0.26.0"})
    assert not new.resolved.kbit_upcast and not new.resolved.adapter_fp32
    assert any("no k-bit preparation" in a for a in new.assumptions)
    # the framework's own preparation (transformers' BEHAVIOUR) where TRL's SFTTrainer does not run
    plain = resolved(tmp_path, TRL_QLORA, "c.yaml", "transformers", framework_versions={"trl": "0.26.0"})
    assert plain.resolved.kbit_upcast


# --- sequence and objective ------------------------------------------------------------------------------------


def test_trl_preference_configs_truncate_to_1024(tmp_path):
    text = "# trl dpo --config dpo.yaml\nmodel_name_or_path: Qwen/Qwen2.5-0.5B\nbeta: 0.1\noutput_dir: out\n"
    res = resolved(tmp_path, text, "dpo.yaml")
    assert res.resolved.objective == "dpo" and res.resolved.seq_len == 1024
    assert hooks_for("trl").seq_len_default("dpo").value == 1024
    assert hooks_for("trl").seq_len_default("sft") is None and FrameworkHooks().seq_len_default("dpo") is None


TRL_GRPO = """# trl grpo --config grpo.yaml
model_name_or_path: Qwen/Qwen2.5-0.5B
per_device_train_batch_size: 8
gradient_accumulation_steps: 4
num_generations: 8
max_prompt_length: 256
output_dir: out
"""


def test_trl_grpo_defaults_no_reference_512_completions_and_a_batch_of_completions(tmp_path):
    rp = resolved(tmp_path, TRL_GRPO, "a.yaml").resolved
    assert rp.objective == "grpo" and rp.reference == "none"
    assert rp.logits_tokens == 512 and rp.seq_len == 256 + 512
    assert rp.generations_per_example == 4  # micro 8 × accumulation 4 completions per device, 8 per prompt
    plain = resolved(tmp_path, TRL_GRPO, "b.yaml", "custom").resolved
    assert plain.reference != "none" and plain.logits_tokens == 256 and plain.generations_per_example == 8


def test_trl_grpo_defaults_are_the_release_the_run_uses(tmp_path):
    """TRL's GRPO defaults come from its own GRPOConfig at the run's version: up to 0.18 a KL coefficient of 0.04
    (a reference model is loaded) and 256-token completions; 1.x no reference and 512 tokens. Each default says the
    release and argument it was read from; up to 0.14 the per-device batch holds prompts, not completions."""
    text = TRL_GRPO.replace("max_prompt_length: 256\n", "")
    old = resolved(tmp_path, text, "a.yaml", framework_versions={"trl": "0.14.0"})
    assert old.resolved.reference == "copy"
    assert old.resolved.logits_tokens == 256 and old.resolved.seq_len == 512 + 256  # max_prompt_length=512 too
    assert old.sources["completion_len"].framework == "TRL 0.14.0 (GRPOConfig.max_completion_length)"
    assert old.sources["prompt_len"].framework == "TRL 0.14.0 (GRPOConfig.max_prompt_length)"
    assert not any("prompt length not set" in str(a) for a in old.assumptions)
    assert old.resolved.generations_per_example == 8  # 0.14: each of the batch's 8 prompts makes 8 completions
    new = resolved(tmp_path, text, "b.yaml", framework_versions={"trl": "1.16.0"})
    assert new.resolved.reference == "none" and new.resolved.logits_tokens == 512
    assert any("prompt length not set" in str(a) for a in new.assumptions)  # 1.x truncates no prompt: said


TRL_PPO_SCRIPT = """from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
from trl.experimental.ppo import PPOConfig, PPOTrainer

reward_path = sys.argv[1]
value_model = AutoModelForSequenceClassification.from_pretrained(reward_path, num_labels=1)
reward_model = AutoModelForSequenceClassification.from_pretrained(reward_path, num_labels=1)
policy = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
ref_policy = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
args = PPOConfig(output_dir="out", per_device_train_batch_size=16, bf16=True)
trainer = PPOTrainer(args=args, model=policy, ref_model=ref_policy, reward_model=reward_model, value_model=value_model)
"""


def test_trl_ppo_is_read_against_the_last_release_that_has_it(tmp_path):
    """TRL 1.13+ ships no PPOConfig (trl/experimental/ppo until 1.12): a PPO run takes the defaults of 1.12.0, the
    newest release that has it (response_length=53, as in the on-policy base it shared with RLOO up to 0.19), and
    the label says so. Reward and
    value models whose ids are only known when the script runs are sized as the policy, and said to be."""
    res = resolved(tmp_path, TRL_PPO_SCRIPT, "ppo.py", framework_versions={"trl": "1.16.0"})
    rp = res.resolved
    assert rp.objective == "ppo" and rp.value_model and rp.reward_model
    assert rp.logits_tokens == 53
    assert res.sources["completion_len"].framework == "TRL 1.12.0 (PPOConfig.response_length)"
    assert frameworks.defaults_for("trl", "ppo", Settings(framework_versions={"trl": "1.16.0"}))[1] == (
        "TRL 1.x (ModelConfig; PPOConfig of 1.12.0)"
    )
    said = [str(a) for a in res.assumptions]
    for role in ("reward model (`reward_model`)", "value model (`value_model`)"):
        assert any(f"{role} is only known when the script runs: sized as the policy" in a for a in said)
    old = resolved(tmp_path, TRL_PPO_SCRIPT, "ppo_old.py", framework_versions={"trl": "0.14.0"})
    assert old.sources["completion_len"].framework == "TRL 0.14.0 (OnPolicyConfig.response_length)"


LLAMAFACTORY_PPO = """model_name_or_path: Qwen/Qwen2.5-0.5B
reward_model: saves/qwen/lora/reward
stage: ppo
do_train: true
finetuning_type: lora
lora_target: all
cutoff_len: 1024
max_new_tokens: 512
per_device_train_batch_size: 1
bf16: true
"""


def test_llamafactory_bounds_a_rollout_prompt_by_cutoff_len(tmp_path):
    rp = resolved(tmp_path, LLAMAFACTORY_PPO, "ppo.yaml").resolved
    assert rp.objective == "ppo" and rp.seq_len == 1024 + 512
    plain = resolved(tmp_path, LLAMAFACTORY_PPO, "b.yaml", "custom")
    assert plain.resolved.seq_len == 512 + 512  # the prompt assumed, and said so
    assert any("prompt length not set" in a for a in plain.assumptions)


# --- model -----------------------------------------------------------------------------------------------------

TORCHTUNE_QLORA = """# tune run lora_finetune_single_device --config qlora.yaml
model:
  _component_: torchtune.models.llama2.qlora_llama2_7b
  lora_attn_modules: ['q_proj', 'v_proj']
  lora_rank: 8
batch_size: 1
tokenizer:
  _component_: torchtune.models.llama2.llama2_tokenizer
  max_seq_len: 512
"""


def test_torchtune_lora_builders_give_each_layer_its_rope_cache(tmp_path):
    rp = resolved(tmp_path, TORCHTUNE_QLORA, "a.yaml").resolved
    assert rp.framework == "torchtune" and rp.peft == "qlora"
    assert rp.rope_caches == rp.arch.layers > 1
    assert resolved(tmp_path, TORCHTUNE_QLORA, "b.yaml", "custom").resolved.rope_caches == 1


# --- no framework names in the resolver ------------------------------------------------------------------------


def _framework_name_tests(source: str) -> list[str]:
    """`fw_key`/`framework` names compared to a string literal or a tuple/set/list of them."""
    names = {"fw_key", "framework", "framework_key", "fw"}

    def named(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in names
        return isinstance(node, ast.Attribute) and node.attr in names

    def literal(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str)
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(literal(e) for e in node.elts)

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(named(s) for s in sides) and any(literal(s) for s in sides):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_resolve_stage_tests_a_framework_name():
    """Framework quirks go to `frameworks/<name>/hooks.py`, not to a name test in a resolve stage."""
    modules = sorted(RESOLVE.glob("*.py"))
    assert len(modules) > 5, modules
    found = {m.name: hits for m in modules if (hits := _framework_name_tests(m.read_text(encoding="utf-8")))}
    assert found == {}


def test_the_name_scan_finds_the_tests_it_forbids():
    source = 'if fw_key == "trl": pass\nif plan.framework in ("axolotl",): pass\nif strategy == "fsdp": pass\n'
    assert len(_framework_name_tests(source)) == 2


TRL_GPTQ = """# trl sft --config sft.yaml
model_name_or_path: Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4
use_peft: true
lora_r: 16
per_device_train_batch_size: 1
max_length: 512
fp16: true
output_dir: out
"""


def test_a_gptq_checkpoint_keeps_its_16_bit_parameters_through_kbit_preparation(tmp_path):
    """peft's prepare_model_for_kbit_training skips the fp32 cast for GPTQ models (`is_gptq_quantized`); TRL 0.20
    runs it, so a bitsandbytes model is upcast there and a GPTQ one is not."""
    gptq = resolved(tmp_path, TRL_GPTQ, "a.yaml", framework_versions={"trl": "0.20.0"})
    assert gptq.resolved.quant_type == "gptq" and gptq.resolved.quant_bits == 4
    assert not gptq.resolved.kbit_upcast
    assert any("without casting its 16-bit parameters" in a for a in gptq.assumptions)
    bnb = resolved(tmp_path, TRL_QLORA, "b.yaml", framework_versions={"trl": "0.20.0"})
    assert bnb.resolved.kbit_upcast


def test_trl_on_policy_debug_samples_are_not_completions_per_prompt(tmp_path):
    """TRL's `num_sample_generations` (OnPolicyConfig, 0.12–0.29: how many times sample completions are generated
    to log) was read as completions per prompt; RLOO's `rloo_k` (RLOOConfig up to 0.19) is that count."""
    text = (
        "# trl rloo --config rloo.yaml\nmodel_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 8\n"
        "rloo_k: 4\nnum_sample_generations: 10\noutput_dir: out\n"
    )
    res = resolved(tmp_path, text, "rloo.yaml", framework_versions={"trl": "0.19.1"})
    assert res.resolved.objective == "rloo"
    assert res.sources["num_generations"].key == "rloo_k" and res.sources["num_generations"].value == 4
