"""``fluxinfra render``: the Pulumi program, offline, to validated Kubernetes YAML."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from fluxinfra.errors import ConfigError
from fluxinfra.inputs import read_bytes


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fluxinfra render",
        description="Run the Pulumi program under the mock runtime and write one validated YAML "
                    "file per Kubernetes resource plus a kustomization.yaml "
                    "(kubectl apply -k OUT deploys what pulumi up would).")
    p.add_argument("--stack", default="dev",
                   help="stack name: stacks/Pulumi.<stack>.yaml (default: %(default)s)")
    p.add_argument("--out", default="build/manifests",
                   help="output directory, or - for one YAML stream on stdout (the tree and "
                        "notes then go to stderr): fluxinfra render --out - | kubectl apply -f - "
                        "(default: %(default)s)")
    p.add_argument("--root", default=None, type=Path,
                   help="project root holding Pulumi.yaml, __main__.py and stacks/ (default: the "
                        "nearest directory upwards from here with a Pulumi.yaml)")
    p.add_argument("--seed-file", type=Path,
                   help="file whose bytes seed the CURVE cert and munge key (default: "
                        "$FLUXINFRA_RENDER_SEED, else the stack name, which is public)")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   help="override one stack config value, as `pulumi config set --path` would "
                        "(e.g. --set installer.source=prefix --set "
                        "'miniclusters[0].size=4'); repeatable")
    p.add_argument("--quiet", action="store_true",
                   help="print only problems and warnings (default: print the resource tree)")
    return p


def _seed(args: argparse.Namespace) -> bytes | None:
    if args.seed_file is not None:
        data = read_bytes(args.seed_file, f"--seed-file {args.seed_file}", ConfigError)
        if len(data) < 32:
            raise ConfigError(f"--seed-file: {args.seed_file} has {len(data)} bytes; accepted: "
                              "at least 32 (e.g. head -c 64 /dev/urandom > seed)")
        return data
    env = os.environ.get("FLUXINFRA_RENDER_SEED")
    return env.encode() if env else None


def _find_root(start: Path) -> Path:
    for folder in (start, *start.parents):
        if (folder / "Pulumi.yaml").is_file():
            return folder
    raise ConfigError(f"--root: no Pulumi.yaml in {start} or above; accepted: run from the "
                      "fluxinfra checkout or pass --root <dir with Pulumi.yaml>")


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    root = args.root if args.root is not None else _find_root(Path.cwd().resolve())
    from fluxinfra.console import warn
    from fluxinfra.render import SECRETS_DIR, ManifestInvalid, render, stream, write_manifests

    start = time.monotonic()
    try:
        rendered = render(args.stack, root=root, seed=_seed(args), sets=args.set)
    except ManifestInvalid as exc:
        for problem in exc.problems:
            print(f"fluxinfra render: invalid: {problem}", file=sys.stderr)
        return 1
    if args.out == "-":
        sys.stdout.write(stream(rendered))
        report = sys.stderr
        where = "stdout"
    else:
        write_manifests(rendered, Path(args.out))
        report = sys.stdout
        where = f"{args.out} (+ kustomization.yaml)"
    if not args.quiet:
        print(rendered.tree(), file=report)
        print(file=report)
        for note in rendered.notes:
            print(f"note: {note}", file=report)
        print(f"{len(rendered.files)} manifests -> {where} (validated, strict, Kubernetes "
              f"{rendered.versions[0]}..{rendered.versions[-1]}; "
              f"{time.monotonic() - start:.1f}s)", file=report)
        if args.out != "-":
            print(f"apply: kubectl apply -k {args.out}", file=report)
    secrets = rendered.secret_files
    if secrets and not args.quiet:
        held = (f"in {Path(args.out) / SECRETS_DIR}/ (directory 0700, files 0600, git-ignored; "
                "applied by the kubectl apply -k above)" if args.out != "-"
                else "in the stream on stdout: keep it out of logs and version control")
        print(f"secrets: {len(secrets)} Secret(s) with key material (CURVE certificate, munge "
              f"key, TLS keys) {held}", file=report)
    for warning in rendered.warnings:
        warn(warning, sys.stderr)
    return 0
