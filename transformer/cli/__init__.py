"""The command line: `python -m transformer COMMAND --help`, each command registered by its module
(COMMAND_MODULES)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformer.cli import align, decode, evaluate, heads, interventions, models, pair_set, timeline, train
from transformer.decoding.result import DecodeInputError
from transformer.io.checkpoint import CheckpointError

COMMAND_MODULES = (
    decode,
    evaluate,
    train,
    models,
    align,
    heads,
    timeline,
    interventions,
    pair_set,
)  # the order --help lists them

CONSOLE_COMMAND = "transformer-explorer"  # pyproject.toml's [project.scripts]


def build_parser() -> argparse.ArgumentParser:
    command = Path(sys.argv[0]).name
    parser = argparse.ArgumentParser(
        prog=command if command == CONSOLE_COMMAND else "python -m transformer",
        description="Decode, inspect, attribute, patch and train encoder-decoder Transformers; each command's --help "
        "says more (docs/command-line.md).",
    )
    # Named once, each with its line: a list of choices in the usage and again above the lines said them twice.
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for module in COMMAND_MODULES:
        module.add_parsers(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (CheckpointError, DecodeInputError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a full disk, a folder without write permission: the files written before are intact
        where = f" ({error.filename})" if error.filename else ""
        print(f"error: {error.strerror or error}{where}; files written before it are intact", file=sys.stderr)
        return 2
