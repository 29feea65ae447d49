"""Every dumped framework argument that may change memory or speed is accounted for: it maps to a plan concept
(`concepts.match`), or `frameworks/irrelevant.py` says why it does not matter (IRRELEVANT) or what the estimate does
instead (NOT_MODELLED). The rule for "may change memory or speed" is `irrelevant.judged`, applied to every dump."""

from __future__ import annotations

import pytest
from vramlens.formats import megatron, shell, verl
from vramlens.frameworks import concepts, irrelevant, schemas
from vramlens.frameworks.axolotl import plugins

DUMPS = [(fw, v) for fw in schemas.frameworks() for v in schemas.versions(fw)]


def unaccounted(arguments: list[dict], framework: str = "") -> list[str]:
    """The judged arguments that no concept maps and no list declares. Megatron-LM's flags (and Megatron-SWIFT's
    arguments, the same flags as dataclass fields) are accounted for by the Megatron reader's own handlers and list
    (formats/megatron.py) too."""
    out = []
    for a in arguments:
        name = a["name"]
        # a store_false flag's dest is its name, the flag an alias (`--torch-fsdp2-no-reshard-after-forward`)
        spellings = [name, *(schemas.argument_name(x) for x in a.get("aliases") or ())]
        if framework in ("megatron", "megatron-swift") and any(
            shell.handler_for("megatron", n) is not None or n in megatron.IRRELEVANT or n in megatron.SWIFT_IRRELEVANT
            for n in spellings
        ):
            continue
        if a.get("plugin") and plugins.ROLES.get(plugins.class_name(a["plugin"]), ("",))[0] != "read":
            continue  # named with its plugin as not modelled, or its plugin is irrelevant (axolotl/plugins.py)
        if str(a.get("owner", "")).rpartition("/")[2] in verl.UNMODELLED_ENGINES and ":" in str(a.get("owner")):
            continue  # an option of an engine the verl reader names as not modelled as a whole
        if not irrelevant.judged(name) or concepts.match(name, a.get("type")) is not None:
            continue
        if irrelevant.lookup(irrelevant.IRRELEVANT, name) or irrelevant.lookup(irrelevant.NOT_MODELLED, name):
            continue
        out.append(name)
    return out


def test_every_framework_asked_for_is_dumped_at_two_versions_or_says_why():
    index = schemas.index()
    for fw in (
        "transformers",
        "trl",
        "axolotl",
        "llamafactory",
        "ms-swift",
        "torchtune",
        "torchtitan",
        "openrlhf",
        "nemo-automodel",
        "verl",
    ):
        have = schemas.versions(fw)
        assert len(have) >= 2 or fw in index["not_dumped"], fw
    assert {v.split(".")[0] for v in schemas.versions("ms-swift")} >= {"1", "3", "4"}
    assert {"0.1.1", "0.6.1"} <= set(schemas.versions("torchtune"))


@pytest.mark.parametrize("framework,version", DUMPS)
def test_dump_is_covered(framework, version):
    args = schemas.schema(framework, version)["arguments"]
    assert args, f"{framework} {version}: an empty dump"
    missing = sorted(set(unaccounted(args, framework)))
    assert not missing, (
        f"{framework} {version}: {len(missing)} argument(s) that may change memory or speed map to "
        f"no concept and are not listed in frameworks/irrelevant.py: {', '.join(missing[:40])}"
    )


def test_a_new_memory_argument_is_caught():
    """A dump that brings an unknown memory-looking argument fails the coverage check; a harmless one passes."""
    new = [
        {"name": "use_magic_offload", "type": "bool"},
        {"name": "actor.zero_bubble_pipeline_parallel", "type": "int"},
        {"name": "--max-frob-len", "type": "int"},
        {"name": "logging_dir", "type": "str"},
        {"name": "per_device_train_batch_size", "type": "int"},
    ]
    assert unaccounted(new) == ["use_magic_offload", "actor.zero_bubble_pipeline_parallel", "--max-frob-len"]


def test_a_bool_flag_with_a_batch_name_is_not_taken_for_the_batch_size():
    assert unaccounted([{"name": "batch_size", "type": "bool"}]) == ["batch_size"]


def test_lists_are_consistent():
    for table in (irrelevant.IRRELEVANT, irrelevant.NOT_MODELLED):
        for name, entry in table.items():
            texts = entry if isinstance(entry, tuple) else (entry,)
            assert all(t and "\n" not in t for t in texts), name
            # a listed name is not also a concept's spelling: one place says what it is
            assert concepts.match(name) is None, f"{name} is listed and also maps to {concepts.match(name).name}"
    assert not set(irrelevant.IRRELEVANT) & set(irrelevant.NOT_MODELLED)


def test_megatron_swift_list_names_only_its_own_arguments():
    """Every name in the Megatron-SWIFT list is an argument some dumped ms-swift release defines: a stale entry
    would hide nothing and say something false."""
    defined = {
        a["name"] for v in schemas.versions("megatron-swift") for a in schemas.schema("megatron-swift", v)["arguments"]
    }
    assert set(megatron.SWIFT_IRRELEVANT) <= defined, sorted(set(megatron.SWIFT_IRRELEVANT) - defined)
