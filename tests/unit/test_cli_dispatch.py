"""The top-level command dispatcher: help, unknown commands, lazy imports."""

import subprocess
import sys

from fluxinfra.cli import COMMANDS, main


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command_is_exit_2_and_names_choices(capsys):
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "'frobnicate'" in err and "query" in err


def test_importing_the_cli_does_not_import_pulumi_or_grpc():
    code = (
        "import sys, fluxinfra.cli; "
        "bad = [m for m in ('pulumi', 'grpc', 'kubernetes', 'ansible') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
