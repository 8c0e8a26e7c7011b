"""The scheduler's process as its two commands run it: ``fluxinfra scheduler`` and
``python -m fluxinfra.scheduler`` host the queue (``fluxinfra/cli/scheduler.py`` wires it in),
while the scheduler package itself never names it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
COMMANDS = {"fluxinfra scheduler": [sys.executable, "-m", "fluxinfra", "scheduler"],
            "python -m fluxinfra.scheduler": [sys.executable, "-m", "fluxinfra.scheduler"]}


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO,
                          **kwargs)  # type: ignore[call-overload]


def test_both_commands_offer_the_same_flags_the_queues_among_them() -> None:
    helps = {name: _run([*argv, "--help"]) for name, argv in COMMANDS.items()}
    for name, proc in helps.items():
        assert proc.returncode == 0, (name, proc.stderr)
    first, second = (proc.stdout for proc in helps.values())
    assert first == second
    flags = [word.strip("[],") for word in first.split() if word.startswith(("--", "[--"))]
    assert flags.index("--queue") < flags.index("--queue-config") < flags.index("--log-level")


def test_the_scheduler_alone_has_no_queue_flags() -> None:
    from fluxinfra.cli.scheduler import parser as command_parser
    from fluxinfra.scheduler.main import parser as scheduler_parser

    ours = {a.dest for a in scheduler_parser()._actions}
    theirs = {a.dest for a in command_parser()._actions}
    assert theirs - ours == {"queue", "queue_config"}
    with pytest.raises(SystemExit):
        scheduler_parser().parse_args(["--queue"])


@pytest.mark.parametrize("name", COMMANDS)
def test_a_bad_queue_config_stops_the_process_naming_the_flag(name: str, tmp_path,
                                                             unreachable_kubeconfig) -> None:
    """The queue's flags reach the queue through the hook: its configuration is read after the
    client is made (no request is sent) and before anything serves or leads."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = _run([*COMMANDS[name], "--kubeconfig", str(unreachable_kubeconfig), "--port", "0",
                 "--no-leader-elect", "--queue", "--queue-config", '[{"name": "q"}]'], env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("fluxinfra scheduler: error: --queue-config[0]:"), proc.stderr
