"""Lab harness: drive scripts/lab, write inventories, run playbooks and read their recaps.

The session brings a private lab up (`scripts/lab up`, its own bridge and /24, picked per run by
`claim_lab` so concurrent runs on one machine never collide) and tears it down at the end. When no
real Flux build is present (CI), the roles use the `prefix` method with a prefix whose bin/flux is
the test double in fixtures/flux-double, and flux_broker_start=false: install, config, secrets,
munge and the service definition run for real; broker start and quorum are skipped (and say so).
Set FLUXINFRA_FLUX_PREFIX, or have /opt/flux/bin/flux, to run the whole flow against a real Flux.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "scripts" / "lab"
DOUBLE = Path(__file__).parent / "fixtures" / "flux-double"
VENV_BIN = REPO / ".venv" / "bin"
#: lock files kept open (and so held) while this process runs, one per claimed lab network
_HELD: list[int] = []
#: the /24s labs of test and benchmark runs pick from (10.244.250: scripts/lab's own default)
LAB_NETS = range(100, 250)


def _networks_in_use() -> set[str]:
    """The 10.244.X prefixes some interface on this machine already has an address in."""
    if not shutil.which("ip"):
        return set()
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True)
    return set(re.findall(r"inet (10\.244\.\d+)\.\d+/", out.stdout))


def claim_lab(prefix: str) -> dict[str, str]:
    """scripts/lab settings no other run on this machine uses: a /24 ``10.244.X`` that no
    interface has and no other process holds (an flock on /tmp/fluxinfra-lab-10.244.X.lock,
    kept until this process ends), and the bridge, namespaces and state directory named
    ``<prefix>X`` after it. Two test runs (or a test run and a benchmark) then never touch each
    other's lab."""
    used = _networks_in_use()
    first = os.getpid() % len(LAB_NETS)
    for k in range(len(LAB_NETS)):
        x = LAB_NETS[(first + k) % len(LAB_NETS)]
        net = f"10.244.{x}"
        if net in used:
            continue
        fd = os.open(f"/tmp/fluxinfra-lab-{net}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _HELD.append(fd)
        name = f"{prefix}{x}"
        return {"FLUXINFRA_LAB_DIR": f"/tmp/fluxinfra-lab-{name}", "FLUXINFRA_LAB_NAME": name,
                "FLUXINFRA_LAB_NET": net}
    raise RuntimeError("no free 10.244.X/24 for a lab (X in 100..249): every one is in use")


LAB_ENV = claim_lab("fxt")
LAB_NET = LAB_ENV["FLUXINFRA_LAB_NET"]
LAB_HOSTS = 4  # three for the instance, one to add and remove
_RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.M,
)


def lab_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the ssh lab needs root (network namespaces, mounts)"
    if (
        not shutil.which("ip")
        or subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0
    ):
        return "`ip netns` is unavailable (install iproute2; needs CAP_SYS_ADMIN)"
    if not Path("/usr/sbin/sshd").exists():
        return "/usr/sbin/sshd is missing (install openssh-server)"
    if not Path("/usr/sbin/munged").exists():
        return "/usr/sbin/munged is missing (install munge)"
    return None


def lab_command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """scripts/lab ARGS for the lab `env` names (default: this run's, LAB_ENV)."""
    return subprocess.run(
        [str(LAB), *args],
        env={**os.environ, **(env or LAB_ENV)},
        text=True,
        capture_output=True,
        timeout=300,
    )


@dataclasses.dataclass
class Lab:
    hosts: list[dict]
    known_hosts: str
    env: dict[str, str] = dataclasses.field(default_factory=lambda: dict(LAB_ENV))

    def exec(self, host: str, command: str) -> subprocess.CompletedProcess:
        """Run a shell command inside a lab host's namespaces (its own /etc, /var, /opt, /run)."""
        return lab_command("exec", host, "--", "/bin/sh", "-c", command, env=self.env)

    def read(self, host: str, path: str) -> str:
        result = self.exec(host, f"cat {path}")
        assert result.returncode == 0, f"{host}:{path}: {result.stderr}"
        return result.stdout

    def state(self, host: str) -> dict[str, tuple]:
        """Everything the host has written: each entry of its overlays' upper layers (type,
        mode, owner, size, mtime) and of its private /run. Equal before and after a run means
        the run changed nothing on the host."""
        hdir = Path(self.env["FLUXINFRA_LAB_DIR"], "hosts", host)
        entries: dict[str, tuple] = {}
        for upper in sorted(hdir.glob("*.upper")):
            for path in [upper, *upper.rglob("*")]:
                st = path.lstat()
                entries[str(path.relative_to(hdir))] = (
                    st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns,
                )
        run = self.exec(host, "find /run -printf '%p %m %u %g %s %T@\\n'")
        assert run.returncode == 0, run.stderr
        for line in run.stdout.splitlines():
            path, *attributes = line.split(" ")
            entries[path] = tuple(attributes)
        return entries


def changed_entries(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """The entries of two Lab.state snapshots that differ (added, removed or changed)."""
    return sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))


@functools.cache
def lab_script():
    """scripts/lab as a module: what it hides from new hosts, and its pure helpers."""
    loader = importlib.machinery.SourceFileLoader("fluxinfra_lab_script", str(LAB))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def not_fresh(lab: Lab, host: str, share: list[str] = ()) -> list[str]:
    """What `host` holds that a host which never saw Flux would not: the accounts the roles
    create, and the paths they create or install into (except those `share` keeps visible)."""
    script = lab_script()
    probes = [
        f"getent passwd {a} >/dev/null && echo 'user {a}'; "
        f"getent group {a} >/dev/null && echo 'group {a}'"
        for a in script.HIDDEN_ACCOUNTS
    ]
    probes += [
        f"test -e {p} && echo 'path {p}'"
        for p in script.HIDDEN_PATHS
        if not script.shared_by(p, list(share))
    ]
    result = lab.exec(host, "; ".join(probes) + "; true")
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def start_lab(count: int, env: dict[str, str] | None = None, share: list[str] = ()) -> Lab:
    """Bring up a lab of `count` fresh hosts (replacing any lab of that name); `share` keeps
    those of this machine's paths visible that the lab hides from new hosts by default."""
    lab_command("down", env=env)
    started = lab_command("up", str(count), *(f"--share={p}" for p in share), env=env)
    if started.returncode != 0:
        lab_command("down", env=env)
        raise RuntimeError(f"scripts/lab up failed: {started.stderr}")
    state = json.loads(Path((env or LAB_ENV)["FLUXINFRA_LAB_DIR"], "lab.json").read_text())
    return Lab(hosts=state["hosts"], known_hosts=state["known_hosts"], env=dict(env or LAB_ENV))


def real_flux_prefix() -> str | None:
    """A prefix holding a real Flux, or None (FLUXINFRA_FLUX_DOUBLE=1 forces the CI path)."""
    if os.environ.get("FLUXINFRA_FLUX_DOUBLE") == "1":
        return None
    for prefix in (os.environ.get("FLUXINFRA_FLUX_PREFIX"), "/opt/flux"):
        if not prefix or not Path(prefix, "bin", "flux").exists():
            continue
        out = subprocess.run([f"{prefix}/bin/flux", "version"], capture_output=True, text=True)
        if out.returncode == 0 and "fluxinfra-test-double" not in out.stdout:
            return prefix
    return None


@dataclasses.dataclass
class FluxInstall:
    prefix: str
    version: str
    real: bool


#: flux_install's default pin (flux_install_core_version in its defaults).
DEFAULT_PIN = str(
    yaml.safe_load((REPO / "roles/flux_install/defaults/main.yml").read_text())[
        "flux_install_core_version"
    ]
)


def pin_refusal(found: str, pin: str) -> list[str]:
    """What flux_install says when flux-core `found` is not the pin and verify_version is on."""
    return [
        f"reports flux-core '{found}' but flux_install_core_version is '{pin}' and "
        "flux_install_verify_version is true",
        f"Set flux_install_core_version: '{found}' to accept this install",
        "or set flux_install_verify_version: false",
    ]


#: The version the test double reports in the tests' prefix: not the roles' default pin
#: (0.76.0), like the real Flux build used here (0.88.0), so a test that leaves the pin at its
#: default meets a prefix that does not match it, with or without a real Flux.
DOUBLE_VERSION = "0.88.0"


def double_prefix(prefix: Path, version: str = DOUBLE_VERSION) -> Path:
    """A prefix install whose bin/flux is the test double answering `flux version` with
    `version` (the double itself sits in libexec/). Every directory is 0755, so the lab hosts,
    which share /tmp, can run it."""
    for directory in (prefix, prefix / "bin", prefix / "libexec"):
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o755)
    shutil.copy(DOUBLE, prefix / "libexec" / "flux-double")
    flux = prefix / "bin" / "flux"
    flux.write_text(
        "#!/bin/sh\n# fluxinfra test double (see libexec/flux-double), not Flux\n"
        f'FLUX_DOUBLE_VERSION={version} exec {prefix / "libexec" / "flux-double"} "$@"\n'
    )
    flux.chmod(0o755)
    return prefix


def write_inventory(
    path: Path, lab: Lab, hosts: list[str], group_vars: dict, host_vars: dict | None = None
) -> Path:
    """A YAML inventory with `hosts` (lab names, rank order) in group flux."""
    by_name = {h["name"]: h for h in lab.hosts}
    members = {}
    for name in hosts:
        entry = by_name.get(name, {"address": f"{LAB_NET}.250", "key": lab.hosts[0]["key"]})
        members[name] = {
            "ansible_host": entry["address"],
            "ansible_ssh_private_key_file": entry["key"],
            **(host_vars or {}).get(name, {}),
        }
    inventory = {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_python_interpreter": "/usr/bin/python3",
                "ansible_ssh_common_args": (
                    f"-o UserKnownHostsFile={lab.known_hosts} -o StrictHostKeyChecking=yes "
                    "-o IdentitiesOnly=yes -o ConnectTimeout=3"
                ),
            },
            "children": {"flux": {"hosts": members, "vars": group_vars}},
        }
    }
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


@dataclasses.dataclass
class PlaybookRun:
    rc: int
    output: str

    @property
    def recap(self) -> dict[str, dict[str, int]]:
        return {
            m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
            for m in _RECAP.finditer(self.output)
        }

    @property
    def flat(self) -> str:
        """The output with every run of whitespace made one space (Ansible wraps messages)."""
        return " ".join(self.output.split())

    def changed_hosts(self) -> dict[str, int]:
        return {h: r["changed"] for h, r in self.recap.items() if r["changed"]}


def run_playbook(
    inventory: Path, playbook: str = "site.yml", *args: str, timeout: int = 600
) -> PlaybookRun:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
    }
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            str(inventory),
            str(REPO / "playbooks" / playbook),
            *args,
        ],
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
        cwd=REPO,
    )
    return PlaybookRun(rc=proc.returncode, output=proc.stdout + proc.stderr)
