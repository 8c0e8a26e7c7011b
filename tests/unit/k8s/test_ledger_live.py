"""The ledger's two dealings with a real Flux instance (flux-core 0.88.0, flux-sched 0.54.0).

Why it withholds whole nodes: with one core of a node marked down in Fluxion, a core-level
request that needs it waits, but a node-exclusive one (``flux run -N1``) is still given the
node, down core included; so the ledger marks every core of a node with pods down (the day a
Fluxion waits there too, the first test fails and per-core withholding becomes possible).

Its job-manager prolog (``ledger-prolog.sh`` as the installer renders it): while a job waits
for its placeholders,
the ledger's reason is the job's memo in ``flux jobs``; once admitted the memo is cleared, the
job starts, and a job with a time limit gets the seconds it waited added to it (an unlimited
one stays unlimited). Here the test writes the ledger's files itself (the Ledger's own writing
of them is in ``test_flux_ledger.py``; the whole path on four real nodes in
``tests/e2e/test_ledger.py``). Skipped, with the reason, without a Flux build (CI has none)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from netns_hosts import flux_binary

from fluxinfra.k8s.installer import FluxInstallerArgs, installer_scripts

FLUX = flux_binary()
pytestmark = pytest.mark.skipif(FLUX is None, reason="no Flux build (flux-core 0.88.0 + "
                                "flux-sched 0.54.0): set FLUXINFRA_FLUX or install one at "
                                "/opt/flux (CI has none)")

REASON = ("waiting for Kubernetes: node n1 refused placeholder pod flux-job-9-1 (OutOfcpu): "
          "pods hold the cores; retrying")

#: Runs inside the instance (``flux start ... flux python DRIVER LEDGER_DIR``): plays the
#: ledger's part by writing its files, and reports what Flux shows of each job.
DRIVER = """
import json, os, subprocess, sys, time
ledger = sys.argv[1]
def flux(*argv):
    return subprocess.run(["flux", *argv], capture_output=True, text=True,
                          check=True).stdout.strip()
def until(what, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"timed out: {what}")
def started(job):
    return '"start"' in flux("job", "eventlog", "-f", "json", job)
out = {}
job = flux("submit", "-t", "100s", "true")
dec = flux("job", "id", "--to=dec", job)
until(lambda: flux("jobs", "-no", "{state}", job) == "RUN")
with open(os.path.join(ledger, "waiting", dec), "w") as fh:
    fh.write(sys.argv[2] + "\\n")
out["memo"] = until(lambda: flux("jobs", "-no", "{annotations.user.ledger}", job))
time.sleep(2)
out["started_before_admitted"] = started(job)
open(os.path.join(ledger, "admitted", dec), "w").close()
flux("job", "wait-event", "-t", "30", job, "start")
out["memo_after"] = flux("jobs", "-no", "{annotations.user.ledger}", job)
out["duration"] = float(flux("jobs", "-no", "{duration}", job))
free = flux("submit", "true")
until(lambda: flux("jobs", "-no", "{state}", free) == "RUN")
time.sleep(1.5)
out["free_started_before_admitted"] = started(free)
open(os.path.join(ledger, "admitted", flux("job", "id", "--to=dec", free)), "w").close()
flux("job", "wait-event", "-t", "30", free, "start")
out["free_duration"] = float(flux("jobs", "-no", "{duration}", free))
print(json.dumps(out))
"""


#: Runs inside the instance: one core of the node down, then a node-exclusive job and a job
#: asking for both cores; prints whether each started within its wait.
DOWN = """
set -e
flux ion-resource set-status "/cluster0/$(hostname)/core0" down
node=$(flux submit -N1 true)
if flux job wait-event -t 15 "$node" start >/dev/null 2>&1; then echo "node-exclusive: ran"
else echo "node-exclusive: waited"; fi
cores=$(flux submit -n1 -c2 true)
if flux job wait-event -t 5 "$cores" start >/dev/null 2>&1; then echo "two cores: ran"
else echo "two cores: waited"; fi
flux cancel --all >/dev/null 2>&1 || true
"""


def test_fluxion_gives_a_node_exclusive_job_a_node_with_a_down_core(tmp_path: Path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs a host of 2 cores or more (one down, a job asking both)")
    script = tmp_path / "down.sh"
    script.write_text(DOWN)
    proc = subprocess.run([FLUX, "start", "-s1", "bash", str(script)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.split("\n")
    assert "two cores: waited" in lines, proc.stdout
    assert "node-exclusive: ran" in lines, \
        "Fluxion now keeps node-exclusive jobs off nodes with down cores: the ledger could " \
        "withhold only the cores pods request (flux_ledger.plan_down)"


def test_a_job_waiting_in_the_prolog_shows_why_and_keeps_its_whole_time_limit(tmp_path: Path):
    prefix = str(Path(FLUX).resolve().parent.parent)
    script = installer_scripts(FluxInstallerArgs(prefix=prefix, lib_dir=str(tmp_path),
                                                 ledger=True))["ledger-prolog.sh"]
    prolog = tmp_path / "ledger-prolog.sh"
    prolog.write_text(script)
    prolog.chmod(0o755)
    for sub in ("admitted", "waiting"):
        (tmp_path / "ledger" / sub).mkdir(parents=True)
    conf = tmp_path / "conf.toml"
    conf.write_text('[job-manager]\nplugins = [{ load = "perilog.so" }]\n'
                    f'prolog = {{ command = ["{prolog}"] }}\n')
    (tmp_path / "driver.py").write_text(DRIVER)
    proc = subprocess.run([FLUX, "start", "-s1", "-c", str(conf), FLUX, "python",
                           str(tmp_path / "driver.py"), str(tmp_path / "ledger"), REASON],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["memo"] == REASON, "the ledger's reason is the waiting job's memo"
    assert not out["started_before_admitted"], "the job waits in its prolog until admitted"
    assert out["memo_after"] == "", "admitted: the memo is cleared"
    assert 102 <= out["duration"] <= 106, \
        f"the -t 100s job got the ~3 s it waited added: {out['duration']}"
    assert not out["free_started_before_admitted"]
    assert out["free_duration"] == 0.0, "a job without a time limit stays without one"
