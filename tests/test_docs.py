"""The README documents every command and every setting of the command line."""

import argparse
import re

import pytest

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


def test_every_serve_setting_has_help_an_environment_variable_and_its_readme_row():
    from docsrv.config import SERVE_OPTIONS, TABLE_END, TABLE_START, settings_table

    readme = (ROOT / "README.md").read_text()
    names = [option.name for option in SERVE_OPTIONS]
    assert len(set(names)) == len(names)
    for option in SERVE_OPTIONS:
        assert option.help.strip() and option.env == "DOCSRV_" + option.name.upper()
        assert f"| `{option.flag}` | `{option.env}` |" in readme, option.flag
    block = readme.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    assert block == settings_table(), "the README's table is stale: run python -m docsrv.config"


def test_serve_help_shows_every_setting_with_its_variable():
    import subprocess
    import sys

    from docsrv.config import SERVE_OPTIONS

    shown = subprocess.run([sys.executable, "-m", "docsrv", "serve", "--help"], capture_output=True, text=True, cwd=ROOT).stdout
    flat = " ".join(shown.split())
    for option in SERVE_OPTIONS:
        assert option.flag in flat and option.env in flat, option.flag
    version = subprocess.run([sys.executable, "-m", "docsrv", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert re.fullmatch(r"docsrv \d+\.\d+\.\d+\S*\n", version.stdout)


def test_settings_come_from_the_environment_and_flags_win(start_server):
    server = start_server("--workers", "1", env={"DOCSRV_MAX_AGE": "123", "DOCSRV_ALLOWED_HOST": "a.example, b.example,127.0.0.1",
                                                 "DOCSRV_ACCESS_LOG": "true", "DOCSRV_STALE_IF_ERROR": "7"})
    response = server.get("/api/v2/project/1/")
    assert response.headers["Cache-Control"] == "public, max-age=123, stale-while-revalidate=60, stale-if-error=7"
    assert server.get("/api/v2/project/1/", headers={"Host": "b.example"}).status == 200
    assert server.get("/api/v2/project/1/", headers={"Host": "localhost"}).status == 400
    server.wait_for('"path":"/api/v2/project/1/"')  # the access log, switched on by the environment
    flagged = start_server("--workers", "1", "--max-age", "9", env={"DOCSRV_MAX_AGE": "123"})
    assert flagged.get("/api/v2/project/1/").headers["Cache-Control"].startswith("public, max-age=9,")


def test_a_malformed_environment_variable_is_named():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "docsrv", "serve"], capture_output=True, text=True, cwd=ROOT,
                            env={"PATH": "/usr/bin:/bin", "DOCSRV_PORT": "eighty"})
    assert result.returncode == 1 and "docsrv: DOCSRV_PORT='eighty': invalid literal for int() with base 10: 'eighty'" in result.stderr


def test_a_keepalive_timeout_of_no_time_is_refused():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "docsrv", "serve", "--keepalive-timeout", "0"], capture_output=True, text=True,
                            cwd=ROOT, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 1 and "docsrv: --keepalive-timeout must be more than 0 seconds, not 0.0" in result.stderr


def test_every_option_of_every_command_has_help_and_shows_its_default():
    """`--help` explains every flag and argument; a flag with a default value names it."""
    import importlib

    cli = importlib.import_module("docsrv.cli")
    for path, parser in subcommand_parsers(cli.build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            name = action.option_strings[0] if action.option_strings else action.dest
            assert action.help and action.help != argparse.SUPPRESS, f"docsrv {' '.join(path)} {name} has no help"
            default = action.default
            if action.option_strings and default not in (None, False) and not isinstance(default, list):
                assert "default" in action.help, f"docsrv {' '.join(path)} {name} does not show its default ({default!r})"


def shell_lines(text: str):
    """The `docsrv ...` command lines of the shell blocks of a Markdown text, without comments."""
    import shlex

    block = False
    for line in text.splitlines():
        if line.startswith("```"):
            block = line.strip() in ("```sh", "```shell", "```bash") if not block else False
            continue
        if block and line.strip().startswith("docsrv "):
            yield shlex.split(line.strip(), comments=True)


@pytest.mark.parametrize("document", ["README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))])
def test_the_command_lines_of_the_docs_are_ones_docsrv_takes(document):
    import importlib

    cli = importlib.import_module("docsrv.cli")
    path = ROOT / document if document == "README.md" else ROOT / "docs" / document
    lines = list(shell_lines(path.read_text()))
    for argv in lines:
        try:
            cli.build_parser().parse_args(argv[1:])
        except SystemExit as error:
            raise AssertionError(f"{document}: docsrv refuses `{' '.join(argv)}`") from error
