"""Two test runs on one machine never share a lab network, lab name or test image tag.

``claim_lab`` (tests/ansible/lab_harness.py) and ``TEST_IMAGE`` (tests/image/image_podman.py)
are checked here from separate processes, as two runs would be; no root needed.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLAIM = (f"import json, sys; sys.path.insert(0, {str(REPO / 'tests' / 'ansible')!r}); "
         "import lab_harness; print(json.dumps([lab_harness.LAB_ENV, "
         "lab_harness.claim_lab('fxb')])); sys.stdout.flush(); sys.stdin.read()")


def _start_claiming() -> tuple[subprocess.Popen, list[dict]]:
    proc = subprocess.Popen([sys.executable, "-c", CLAIM], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    return proc, json.loads(proc.stdout.readline())


def test_concurrent_runs_get_different_lab_networks_and_names():
    first, held = _start_claiming()  # keeps its claims until its stdin closes
    try:
        second, other = _start_claiming()
        try:
            nets = [env["FLUXINFRA_LAB_NET"] for env in held + other]
            names = [env["FLUXINFRA_LAB_NAME"] for env in held + other]
            dirs = [env["FLUXINFRA_LAB_DIR"] for env in held + other]
            assert len(set(nets)) == len(set(names)) == len(set(dirs)) == 4, held + other
            for env in held + other:
                assert env["FLUXINFRA_LAB_NET"].startswith("10.244.")
                assert env["FLUXINFRA_LAB_NET"] != "10.244.250"  # scripts/lab's own default
                assert len(env["FLUXINFRA_LAB_NAME"]) <= 8  # scripts/lab's limit
                assert env["FLUXINFRA_LAB_NAME"].endswith(env["FLUXINFRA_LAB_NET"].split(".")[-1])
        finally:
            second.communicate("")
    finally:
        first.communicate("")


def test_a_claim_is_held_while_its_run_lasts_and_released_after():
    proc, claimed = _start_claiming()
    locks = [f"/tmp/fluxinfra-lab-{env['FLUXINFRA_LAB_NET']}.lock" for env in claimed]
    try:
        for lock in locks:
            fd = os.open(lock, os.O_RDWR)
            try:
                with pytest.raises(BlockingIOError):
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)
    finally:
        proc.communicate("")
    for lock in locks:
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
        finally:
            os.close(fd)


def test_each_run_tags_its_own_test_image():
    code = (f"import sys; sys.path.insert(0, {str(REPO / 'tests' / 'image')!r}); "
            "import image_podman; print(image_podman.TEST_IMAGE)")
    tags = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(2)}
    assert len(tags) == 2 and all(t.startswith("localhost/fluxinfra:test-") for t in tags)
