"""The README documents every command and every setting of the command line."""

import argparse
import re

from conftest import ROOT


def subcommand_parsers(parser: argparse.ArgumentParser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from subcommand_parsers(sub, (*prefix, name))


def test_readme_documents_every_command_and_option():
    import importlib

    cli = importlib.import_module("docsrv.cli")
    readme = (ROOT / "README.md").read_text()
    commands = list(subcommand_parsers(cli.build_parser()))
    assert commands
    for path, parser in commands:
        has_children = any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
        if has_children:
            continue
        assert f"docsrv {' '.join(path)}" in readme, path
        for action in parser._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", readme), f"{' '.join(path)} {option}"
