"""The README, the docs and the role READMEs stay true to the project.

- every command of the README's shell blocks is checked: a ``fluxinfra`` line parses with that
  subcommand's own argparse parser and the files it names exist, a ``make`` target exists, a
  benchmark exists and takes the options given, a playbook passes ``--syntax-check``, a script
  is there and executable; the README's YAML objects validate (a Pod against Kubernetes'
  schema, a PodGroup against the CRD the scheduler component installs). The ``fluxinfra``
  examples are also run for real by ``tests/unit/cli/test_examples_run.py``;
- every relative link of README.md, docs/, the role READMEs, CHANGELOG.md, benchmarks/ and
  examples/ resolves, ``#anchors`` included (GitHub's heading slugs);
- README.md stays under 12 KB, and no README or doc line carries a run diary (a time in UTC,
  an issue number); CHANGELOG.md is where history goes;
- each role README's *Role Variables* table is its ``meta/argument_specs.yml``, and the
  Python-only fields of the Pulumi components' Args are the dataclasses' (the stack-settable
  ones are the config reference, ``tests/unit/k8s/test_config.py``).

``python tests/unit/test_docs.py`` prints the generated tables, to paste after a change.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
ROLES = ("flux_install", "flux_broker")
#: the pages whose links must resolve
LINKED = [README, REPO / "CHANGELOG.md", REPO / "benchmarks" / "README.md",
          REPO / "examples" / "README.md", *sorted((REPO / "docs").rglob("*.md")),
          *(REPO / "roles" / role / "README.md" for role in ROLES)]
#: the pages that describe the project as it is (CHANGELOG.md is history, by design)
CURRENT = [p for p in LINKED if p.name != "CHANGELOG.md"]
README_LIMIT = 12_000  # bytes

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
_INLINE_CODE = re.compile(r"`[^`\n]*`")
#: a run diary's markers: a clock time in UTC, a date with UTC after it, an issue number
_DIARY = [re.compile(r"\b\d{1,2}:\d\d(?::\d\d)?(?:\s*-\s*\d{1,2}:\d\d)?\s*UTC\b"),
          re.compile(r"\b20\d\d-\d\d-\d\d\b.*\bUTC\b"),
          re.compile(r"\bissues? #?\d+\b", re.I)]


# ---------------------------------------------------------------------------------------------
# Markdown helpers


def code_blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(text)]


def prose(text: str) -> str:
    """``text`` without fenced blocks and inline code (where links are not links)."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _INLINE_CODE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def table_rows(text: str, after: str) -> list[list[str]]:
    """The cells of the first Markdown table after the line ``after`` (``\\|`` kept in cells)."""
    lines = text[text.index(after):].splitlines()[1:]
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        rows.append([c.strip() for c in cells])
    return rows


# ---------------------------------------------------------------------------------------------
# Generated tables: role variables, the components' Python-only Args fields


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def role_variables_table(role: str) -> str:
    """The *Role Variables* table of ``roles/<role>/README.md``, from its argument specs."""
    spec = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    lines = ["| variable | type | default | description |", "| --- | --- | --- | --- |"]
    for name, opt in options.items():
        kind = opt.get("type", "str")
        if kind == "list" and "elements" in opt:
            kind = f"list of {opt['elements']}"
        if "choices" in opt:
            kind += " (" + ", ".join(str(c) for c in opt["choices"]) + ")"
        if opt.get("required"):
            default = "(required)"
        else:
            default = "`" + _cell(json.dumps(opt.get("default"))) + "`"
        description = opt.get("description", "")
        if isinstance(description, list):
            description = " ".join(description)
        lines.append(f"| `{name}` | {_cell(kind)} | {default} | {_cell(description)} |")
    return "\n".join(lines) + "\n"


def _reference_sections():
    from fluxinfra.k8s.stack import _REFERENCE_SECTIONS
    return _REFERENCE_SECTIONS


def field_docs(cls: type) -> dict[str, str]:
    """Each dataclass field's attribute docstring (the string literal after it), first line."""
    tree = ast.parse(inspect.getsource(cls).lstrip())
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for stmt, after in zip(body, body[1:], strict=False):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[stmt.target.id] = " ".join(after.value.value.split())
    return docs


def python_only_fields() -> list[tuple[type, dataclasses.Field]]:
    """Every Args field that a stack file cannot set (not declared with ``option()``)."""
    from fluxinfra.k8s.config import options_of
    out = []
    for _, cls, _ in _reference_sections():
        settable = {f.name for f, _ in options_of(cls).values()}
        out += [(cls, f) for f in dataclasses.fields(cls) if f.name not in settable]
    return out


def python_only_table() -> str:
    """docs/kubernetes.md's table of the Args fields set in Python only."""
    from fluxinfra.k8s.config import default_of
    lines = ["| Args class | field | default | description |", "| --- | --- | --- | --- |"]
    for cls, f in python_only_fields():
        doc = field_docs(cls).get(f.name, "")
        lines.append(f"| `{cls.__name__}` | `{f.name}` | `{_cell(json.dumps(default_of(f)))}` | "
                     f"{_cell(doc)} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# README size and diary


def test_the_readme_stays_under_12_kb():
    size = len(README.read_bytes())
    assert size < README_LIMIT, (
        f"README.md is {size:,} bytes, over {README_LIMIT:,}: move detail to docs/ and link it")


@pytest.mark.parametrize("path", CURRENT, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_line_is_a_run_diary(path):
    assert path.exists(), f"{path.relative_to(REPO)} is missing"
    bad = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
           for n, line in enumerate(path.read_text().splitlines(), 1)
           if any(rx.search(line) for rx in _DIARY)]
    assert not bad, ("docs describe the project as it is; dated run logs and issue numbers go to "
                     "commit messages and CHANGELOG.md:\n" + "\n".join(bad))


@pytest.mark.parametrize("line, diary", [
    ("measured 2026-11-24 08:20-08:45 UTC on a loaded machine", True),
    ("(10:02-10:12 UTC, beside a CI run)", True),
    ("The probes of issue 11", True),
    ("| `first` 1 core | 0.029 / 0.110 (3.9x) | measured 2026-11-29 |", False),
    ("job-sweep   Reserved   default   64     2026-11-24T03:10:00Z", False),
])
def test_the_diary_check_tells_a_log_from_a_date(line, diary):
    assert any(rx.search(line) for rx in _DIARY) is diary


# ---------------------------------------------------------------------------------------------
# Links


def _links() -> list[tuple[str, Path, str]]:
    out = []
    for path in (p for p in LINKED if p.exists()):
        for target in _LINK.findall(prose(path.read_text())):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            out.append((f"{path.relative_to(REPO)} -> {target}", path, target))
    return out


LINKS = _links()


def test_the_docs_link_to_each_other():
    assert len(LINKS) > 50, "the link check found almost no links: is the pattern broken?"


@pytest.mark.parametrize(("name", "page", "target"), LINKS, ids=[n for n, _, _ in LINKS])
def test_every_relative_link_resolves(name, page, target):
    file_part, _, anchor = target.partition("#")
    dest = (page.parent / file_part).resolve() if file_part else page
    assert dest.exists(), f"{name}: {dest.relative_to(REPO) if REPO in dest.parents else dest} " \
                          "does not exist"
    if anchor:
        assert dest.suffix == ".md", f"{name}: an anchor into a file that is not Markdown"
        assert anchor in anchors(dest), (
            f"{name}: no heading with anchor #{anchor} in {dest.relative_to(REPO)}; "
            f"there are: {sorted(anchors(dest))}")


def test_slugs_are_githubs():
    assert slug("What makes it fast (and what does not)") == \
        "what-makes-it-fast-and-what-does-not"
    assert slug("`fluxinfra query` (resource-query compatible)") == \
        "fluxinfra-query-resource-query-compatible"
    assert slug("Node join and leave: the rank map") == "node-join-and-leave-the-rank-map"


# ---------------------------------------------------------------------------------------------
# The README's commands


class _Parsed(Exception):
    """Raised once a subcommand's parser accepted its arguments, before anything runs."""


def parse_fluxinfra(argv: list[str]) -> argparse.Namespace:
    """Parse ``fluxinfra ARGV`` with the subcommand's own parser, as its ``main`` would, and stop
    there: the outermost ``parse_known_args`` call raises :class:`_Parsed` with the result."""
    from fluxinfra.cli import COMMANDS

    name, rest = argv[0], argv[1:]
    assert name in COMMANDS, f"fluxinfra has no subcommand {name!r} ({', '.join(COMMANDS)})"
    module = importlib.import_module(COMMANDS[name][0])
    original = argparse.ArgumentParser.parse_known_args
    depth = [0]

    def parse_known_args(self, args=None, namespace=None):
        depth[0] += 1
        try:
            result = original(self, args, namespace)
        finally:
            depth[0] -= 1
        if depth[0] == 0:
            raise _Parsed(result)
        return result

    with mock.patch.object(argparse.ArgumentParser, "parse_known_args", parse_known_args):
        try:
            module.main(rest)
        except _Parsed as done:
            namespace, extra = done.args[0]
            assert not extra, f"fluxinfra {name}: unrecognized arguments {extra}"
            return namespace
        except SystemExit as exc:
            pytest.fail(f"fluxinfra {shlex.join(argv)}: the parser refused it (exit {exc.code})")
    pytest.fail(f"fluxinfra {name}: main() ran without parsing its arguments")


def shell_lines(path: Path) -> list[str]:
    """The commands of ``path``'s shell blocks: continuations joined, prompts, comments and
    environment assignments dropped."""
    out = []
    for lang, body in code_blocks(path.read_text()):
        if lang not in ("sh", "console", "bash", "shell"):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ").strip()
            if not line or line.startswith("#"):
                continue
            words = shlex.split(line, comments=True)
            while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
                words.pop(0)
            if words:
                out.append(words)
    return out


def _commands_of(words: list[str]) -> list[tuple[list[str], list[str]]]:
    """Each command of a shell line (split at ``&&``, ``||``, ``;``) as (argv, files it reads
    from ``<``); output redirections are dropped."""
    out: list[tuple[list[str], list[str]]] = []
    argv: list[str] = []
    inputs: list[str] = []
    it = iter(words)
    for w in it:
        if w in ("&&", ";", "||"):
            out.append((argv, inputs))
            argv, inputs = [], []
        elif w in ("<", ">", ">>", "2>"):
            target = next(it, "")
            if w == "<":
                inputs.append(target)
        else:
            argv.append(w)
    out.append((argv, inputs))
    return [(a, i) for a, i in out if a]


def _paths_named(argv: list[str]) -> list[str]:
    """Arguments that name files of the repository (examples/..., playbooks/..., ...)."""
    tops = {p.name for p in REPO.iterdir()}
    return [a for a in argv if "/" in a and a.split("/")[0] in tops and not a.startswith("-")]


def _make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z0-9_-]*):", text, re.M))


def check_make(argv):
    targets = [a for a in argv[1:] if "=" not in a and not a.startswith("-")]
    assert targets, "make without a target"
    missing = set(targets) - _make_targets()
    assert not missing, f"the Makefile has no target {missing}"
    stacks = [a.split("=", 1)[1] for a in argv[1:] if a.startswith("STACK=")]
    for stack in stacks:
        assert (REPO / "stacks" / f"Pulumi.{stack}.yaml").exists(), f"no stack {stack}"


def check_fluxinfra(argv):
    parse_fluxinfra(argv[1:])


def check_python(argv):
    if argv[1:3] == ["-m", "fluxinfra.service.client"]:
        assert importlib.util.find_spec("fluxinfra.service.client")
        return
    assert argv[1] == "benchmarks/run.py", f"an unknown python command: {argv}"
    check_benchmark(argv[2:])


def check_benchmark(argv):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        run = importlib.import_module("run")
        modules = run.discover()
        argv, _ = run._pop_results_options(run._pop_label(argv)[0])  # run.py's own
        name, options = argv[0], argv[1:]
        assert name in modules, f"benchmarks/run.py has no benchmark {name!r}: {sorted(modules)}"
        parser = run._parser_of(run._load(name, modules[name]))
        assert parser is not None, f"benchmark {name} has no argparse parser to check against"
        try:
            parser.parse_args([o if o != "PATH" else "/bin/true" for o in options])
        except SystemExit as exc:
            pytest.fail(f"benchmarks/run.py {name}: {options} refused (exit {exc.code})")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


#: where ``scripts/lab up`` writes its inventory (its ``LAB_DIR`` default)
LAB_INVENTORY = "/tmp/fluxinfra-lab/inventory.ini"


def check_ansible_playbook(argv):
    given = argv[argv.index("-i") + 1]
    inventory = given
    if given == LAB_INVENTORY:  # the lab's, made by `scripts/lab up`: check the script says so
        lab = (REPO / "scripts" / "lab").read_text()
        assert '"/tmp/fluxinfra-lab"' in lab and '"inventory.ini"' in lab, (
            f"scripts/lab no longer writes {LAB_INVENTORY}")
        inventory = "playbooks/inventory/hosts.ini"
    playbooks = [a for a in argv[1:] if a.endswith(".yml")]
    for path in [inventory, *playbooks]:
        assert (REPO / path).is_file(), f"{path} does not exist"
    binary = shutil.which("ansible-playbook") or str(Path(sys.executable).parent /
                                                     "ansible-playbook")
    if not Path(binary).exists():
        pytest.skip("ansible-playbook is not installed (the dev extra brings it)")
    extra = [a for a in argv[1:] if a not in ("-i", given) and not a.endswith(".yml")]
    proc = subprocess.run([binary, "-i", inventory, *playbooks, *extra, "--syntax-check"],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ANSIBLE_LOCALHOST_WARNING": "false"})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def check_sudo(argv):
    CHECKS[argv[1]](argv[1:])


def check_script(argv):
    path = REPO / argv[0]
    assert path.is_file() and os.access(path, os.X_OK), f"{argv[0]} is not an executable script"


def check_pytest(argv):
    for path in _paths_named(argv):
        assert (REPO / path).exists(), f"{path} does not exist"


def check_pulumi(argv):
    assert (REPO / "Pulumi.yaml").is_file()
    if "--stack" in argv:
        stack = argv[argv.index("--stack") + 1]
        assert (REPO / "stacks" / f"Pulumi.{stack}.yaml").is_file(), f"no stack {stack}"


def check_kubectl(argv):
    """kubectl lines need a cluster: what they name must be what the project installs."""
    text = " ".join(argv)
    if "label namespace" in text:
        from fluxinfra.queue import webhook
        assert "fluxinfra.io/queue=enabled" in text
        assert "fluxinfra.io/queue" in inspect.getsource(webhook)
    if "fluxjobs" in argv:
        from fluxinfra.kube import fluxjob as api
        assert "fluxjobs" in inspect.getsource(api)
    if "flux-queue" in argv:
        import tomllib
        scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
        assert "kubectl-flux_queue" in scripts


def check_kube(argv):
    """``scripts/kube <command>``: the bed's command line has that command."""
    check_script(argv)
    sys.path.insert(0, str(REPO / "scripts"))
    from kubebed.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main([argv[1], "--help"])
    assert exited.value.code == 0, f"scripts/kube has no command {argv[1]!r}"


CHECKS = {"make": check_make, "fluxinfra": check_fluxinfra, "python": check_python,
          "ansible-playbook": check_ansible_playbook, "sudo": check_sudo,
          "scripts/lab": check_script, "scripts/kube": check_kube, "pytest": check_pytest,
          "pulumi": check_pulumi, "kubectl": check_kubectl}


def readme_commands() -> list[tuple[list[str], list[str]]]:
    """The README's commands: its shell blocks' and its figures table's."""
    out = []
    for words in shell_lines(README):
        out += _commands_of(words)
    for row in table_rows(README.read_text(), "## Headline figures"):
        out.append((shlex.split(row[-1].strip("`")), []))
    return out


COMMANDS_IN_README = readme_commands()


@pytest.mark.parametrize(("argv", "inputs"), COMMANDS_IN_README,
                         ids=[shlex.join(a)[:70] for a, _ in COMMANDS_IN_README])
def test_every_readme_command_is_checked(argv, inputs):
    check = CHECKS.get(argv[0])
    assert check, (f"README.md runs {argv[0]!r}, which this test does not know how to check: "
                   "add a check to tests/unit/test_docs.py")
    check(argv)
    for path in [*_paths_named(argv), *inputs]:
        assert (REPO / path).exists(), f"{shlex.join(argv)}: {path} does not exist"


def test_every_fluxinfra_subcommand_in_the_readme_answers_help():
    used = sorted({a[1] for a, _ in COMMANDS_IN_README if a[0] == "fluxinfra"})
    assert {"query", "match", "draw", "distribute", "scheduler", "service", "simulate"} <= set(used)
    for name in used:
        proc = subprocess.run([sys.executable, "-m", "fluxinfra", name, "--help"],
                              capture_output=True, text=True, timeout=60, cwd=REPO)
        assert proc.returncode == 0 and "usage" in proc.stdout.lower(), (name, proc.stderr)


def test_the_readme_quick_starts_cover_each_way_of_using_it():
    text = README.read_text()
    for needle in ("make render", "make deploy", "pulumi up", "playbooks/site.yml",
                   "schedulerName: fluxion", "kind: PodGroup", "fluxinfra.io/queue=enabled",
                   "fluxinfra query", "fluxinfra distribute", "make test-fast", "make e2e"):
        assert needle in text, f"README.md lost its quick start for {needle!r}"


def test_the_readme_yaml_validates():
    docs = [d for lang, body in code_blocks(README.read_text()) if lang == "yaml"
            for d in yaml.safe_load_all(body) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Pod", "PodGroup"} <= kinds
    from fluxinfra.k8s.scheduler import PODGROUP_GROUP, podgroup_crd
    for doc in docs:
        if doc["kind"] == "PodGroup":
            import jsonschema
            crd = podgroup_crd()
            version = next(v for v in crd["spec"]["versions"]
                           if f"{PODGROUP_GROUP}/{v['name']}" == doc["apiVersion"])
            jsonschema.validate(doc, version["schema"]["openAPIV3Schema"])
        elif doc["kind"] == "Pod":
            import kubernetes_validate
            kubernetes_validate.validate(doc, "1.29", strict=True)
            assert doc["spec"]["schedulerName"] == "fluxion"
            group = doc["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"]
            assert group in {d["metadata"]["name"] for d in docs if d["kind"] == "PodGroup"}


# ---------------------------------------------------------------------------------------------
# Role READMEs and the components' Args


@pytest.mark.parametrize("role", ROLES)
def test_role_readme_has_the_galaxy_sections(role):
    text = (REPO / "roles" / role / "README.md").read_text()
    for heading in ("## Requirements", "## Role Variables", "## Dependencies",
                    "## Example Playbook", "## License"):
        assert heading in text, f"roles/{role}/README.md lacks {heading}"


@pytest.mark.parametrize("role", ROLES)
def test_role_variables_are_the_argument_specs(role):
    text = (REPO / "roles" / role / "README.md").read_text()
    assert role_variables_table(role) in text, (
        f"roles/{role}/README.md's Role Variables table differs from "
        f"roles/{role}/meta/argument_specs.yml; paste this table (python tests/unit/test_docs.py):"
        f"\n\n{role_variables_table(role)}")


@pytest.mark.parametrize("role", ROLES)
def test_role_variables_table_lists_each_variable_once(role):
    rows = table_rows((REPO / "roles" / role / "README.md").read_text(), "## Role Variables")
    names = [r[0].strip("`") for r in rows]
    spec = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    assert names == list(spec["argument_specs"]["main"]["options"])
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
    assert set(names) == set(defaults), "defaults/main.yml and argument_specs.yml disagree"


def test_the_components_python_only_args_are_documented():
    doc = (REPO / "docs" / "kubernetes.md").read_text()
    assert python_only_table() in doc, (
        "docs/kubernetes.md's table of Python-only Args fields differs from the dataclasses; "
        f"paste this table (python tests/unit/test_docs.py):\n\n{python_only_table()}")


def test_every_args_field_has_a_row_in_docs_kubernetes():
    """Read from the page itself: each field of each component's Args has a row, with its
    default, in its component's config-reference table (its stack key being the field's name
    in camelCase) or in the table of fields set in Python."""
    from fluxinfra.k8s.config import default_of, options_of
    doc = (REPO / "docs" / "kubernetes.md").read_text()
    python_rows = {(r[0].strip("`"), r[1].strip("`")): r[2]
                   for r in table_rows(doc, "### Args fields set in Python")}
    missing = []
    for section, cls, _ in _reference_sections():
        rows = {r[0].strip("`"): r[2] for r in table_rows(doc, f"\n`fluxinfra:{section}`")}
        keys = {f.name: key for key, (f, _) in options_of(cls).items()}
        for f in dataclasses.fields(cls):
            shown = "`" + _cell(json.dumps(default_of(f))) + "`"
            if f.name in keys:
                assert re.sub(r"(?<!^)([A-Z])", r"_\1", keys[f.name]).lower() == f.name
                got = rows.get(keys[f.name])
            else:
                got = python_rows.get((cls.__name__, f.name))
            if got != shown:
                missing.append(f"{cls.__name__}.{f.name}: {got!r}, want {shown!r}")
    assert not missing, "docs/kubernetes.md: " + "; ".join(missing)


def test_every_args_class_is_in_the_reference():
    import pkgutil

    import fluxinfra.k8s as k8s
    found = set()
    for info in pkgutil.iter_modules(k8s.__path__):
        module = importlib.import_module(f"fluxinfra.k8s.{info.name}")
        found |= {obj for name, obj in vars(module).items()
                  if name.endswith("Args") and dataclasses.is_dataclass(obj)
                  and obj.__module__ == module.__name__}
    assert found == {cls for _, cls, _ in _reference_sections()}


def test_the_python_only_fields_have_docstrings():
    missing = [f"{c.__name__}.{f.name}" for c, f in python_only_fields()
               if not field_docs(c).get(f.name)]
    assert not missing, f"give these Args fields a docstring: {missing}"


if __name__ == "__main__":
    for role in ROLES:
        print(f"roles/{role}/README.md, Role Variables:\n\n{role_variables_table(role)}")
    print(f"docs/kubernetes.md, Python-only Args fields:\n\n{python_only_table()}")
