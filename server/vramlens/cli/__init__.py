"""The `vramlens` command line: one module per subcommand, registered in SUBCOMMANDS."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand name -> module under vramlens.cli that defines add_arguments(parser) and run(args) -> int
SUBCOMMANDS: dict[str, str] = {
    "estimate": "estimate",
    "plan": "plan",
    "check": "check",
    "serve": "serve",
    "trace": "trace",
    "probe": "probe",
    "gpus": "gpus",
    "calibration": "calibration",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; with `only`, just that subcommand's module is imported (a fast start for
    `vramlens serve`, and one broken subcommand cannot stop the others)."""
    from vramlens import __version__

    parser = argparse.ArgumentParser(prog="vramlens", description="GPU-memory estimates for LLM training configs.")
    parser.add_argument("--version", action="version", version=f"vramlens {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in SUBCOMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name)
            continue
        module = importlib.import_module(f"vramlens.cli.{module_name}")
        p = sub.add_parser(
            name, help=module.__doc__.strip().splitlines()[0] if module.__doc__ else None, description=module.__doc__
        )
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # A config's text can hold what the terminal's encoding cannot (a lone surrogate from a Python `'\ud800'`
    # literal): shown as an escape, never a UnicodeEncodeError that stops the report halfway.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in SUBCOMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    try:
        return int(args._module.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
