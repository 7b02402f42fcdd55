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
