"""Where a render puts key material, and what it says about the seed.

Secrets go to ``<out>/secrets/`` (0700, files 0600, git-ignored, their own kustomization);
checked with the real git and, where kubectl is installed, kubectl's own kustomize.
"""

from __future__ import annotations

import io
import shutil
import stat
import subprocess
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from fluxinfra.cli import main as cli_main
from fluxinfra.render import write_manifests

ROOT = Path(__file__).resolve().parents[2]


def test_secrets_are_private_and_apart(rendered, tmp_path):
    dev = rendered["dev"]
    assert dev.secret_files == ["secret-default-hello-curve.yaml",
                                "secret-flux-installer-flux-installer-keys.yaml",
                                "secret-fluxinfra-system-fluxion-queue-tls.yaml"]
    (tmp_path / "secrets").mkdir(mode=0o755)
    (tmp_path / "secrets" / dev.secret_files[0]).write_text("old")
    (tmp_path / "secrets" / dev.secret_files[0]).chmod(0o644)  # a looser file from before
    write_manifests(dev, tmp_path)
    private = tmp_path / "secrets"
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    for name in dev.secret_files:
        assert stat.S_IMODE((private / name).stat().st_mode) == 0o600, name
        assert (private / name).read_text() == dev.files[name]
        assert not (tmp_path / name).exists()
    leaked = [p.name for p in tmp_path.glob("*.yaml") if "kind: Secret\n" in p.read_text()]
    assert leaked == []


def test_a_previous_top_level_secret_is_removed(rendered, tmp_path):
    dev = rendered["dev"]
    old = tmp_path / dev.secret_files[0]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({"resources": [old.name]}))
    old.write_text("key material from an older render")
    write_manifests(dev, tmp_path)
    assert not old.exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_ignores_the_secrets(rendered, tmp_path):
    write_manifests(rendered["dev"], tmp_path / "out")
    run = {"cwd": tmp_path, "capture_output": True, "text": True, "check": True}
    subprocess.run(["git", "init", "-q"], **run)
    subprocess.run(["git", "add", "-A"], **run)
    staged = subprocess.run(["git", "diff", "--cached", "--name-only"], **run).stdout.split()
    assert "out/kustomization.yaml" in staged and "out/secrets/.gitignore" not in staged
    assert not [f for f in staged if f.startswith("out/secrets/")], staged


@pytest.mark.skipif(shutil.which("kubectl") is None,
                    reason="kubectl is not installed (its kustomize builds the directory)")
def test_kubectl_kustomize_applies_every_manifest_secrets_included(rendered, tmp_path):
    write_manifests(rendered["prod"], tmp_path)
    proc = subprocess.run(["kubectl", "kustomize", str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    built = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert built == sorted((m["kind"], m["metadata"]["name"]) for m in rendered["prod"].manifests)
    assert sum(d["kind"] == "Secret" for d in docs) == 3  # + the queue webhook's TLS


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _render_cli(tmp_path, monkeypatch, *extra: str) -> tuple[str, str]:
    err = _Terminal()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FLUXINFRA_RENDER_SEED", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli_main(["render", "--stack", "prod", "--root", str(ROOT), "--out",
                         str(tmp_path / "out"), *extra]) == 0
    return out.getvalue(), err.getvalue()


def test_prod_without_a_seed_warns_in_colour_on_a_terminal(tmp_path, monkeypatch):
    out, err = _render_cli(tmp_path, monkeypatch)
    assert err.startswith("\033[1;33mwarning:\033[0m the CURVE certificate and munge key (and "
                          "the queue webhook's TLS key) are derived from the stack name 'prod', "
                          "which is public")
    assert "--seed-file FILE" in err and err.count("\n") == 1
    assert "secrets: 3 Secret(s) with the CURVE certificate and munge key (and the queue " \
           "webhook's TLS key) in " in out
    assert "(directory 0700, files 0600, git-ignored" in out


def test_a_seed_file_silences_the_warning(tmp_path, monkeypatch):
    seed = tmp_path / "seed"
    seed.write_bytes(bytes(range(64)))
    _, err = _render_cli(tmp_path, monkeypatch, "--seed-file", str(seed), "--quiet")
    assert err == ""


def test_the_readme_shows_the_seed_where_it_shows_prod():
    text = (ROOT / "README.md").read_text()
    at = text.index("make render STACK=prod")
    assert "--seed-file" in text[at:at + 400] and "SEED=FILE" in text[at:at + 60]
