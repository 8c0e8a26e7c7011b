"""fluxinfra.hostlist and fluxinfra.idset: Flux's RFC 29 hostlists and RFC 22 idsets (and the
copies of them, and of the TOML writer, that node-watch runs on).

The differential tests give the same texts and host lists to flux-core's own libhostlist and
libidset (``flux python`` with ``flux.hostlist`` / ``flux.idset``) where a Flux build is found,
and skip saying so where none is (CI has none). The inputs are drawn from a seeded generator,
many per Flux process. The property tests (hypothesis) check the round trips without Flux.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxinfra import hostlist, idset

#: run under ``flux python``: decode / encode every input with flux-core's own code
ORACLE = r"""
import json, sys
from flux.hostlist import Hostlist
from flux.idset import IDset, IDSET_FLAG_BRACKETS, IDSET_FLAG_RANGE

def attempt(fn):
    try:
        return fn()
    except (ValueError, OSError, TypeError):
        return None

cases = json.load(sys.stdin)
json.dump({
    "hostlist_decode": [attempt(lambda: list(Hostlist(t))) for t in cases["hostlist_decode"]],
    "hostlist_encode": [attempt(lambda: Hostlist(h).encode()) for h in cases["hostlist_encode"]],
    "idset_decode": [attempt(lambda: list(IDset(t))) for t in cases["idset_decode"]],
    "idset_encode": [[str(IDset(ids)), IDset(ids).encode(IDSET_FLAG_RANGE | IDSET_FLAG_BRACKETS)]
                     for ids in cases["idset_encode"]],
}, sys.stdout)
"""


def _flux() -> str | None:
    for prefix in (os.environ.get("FLUXINFRA_FLUX_PREFIX"), "/opt/flux", "/opt/flux-0.88"):
        if prefix and Path(prefix, "bin", "flux").exists():
            probe = subprocess.run([f"{prefix}/bin/flux", "python", "-c",
                                    "import flux.hostlist, flux.idset"], capture_output=True)
            if probe.returncode == 0:
                return f"{prefix}/bin/flux"
    return None


@pytest.fixture(scope="module")
def flux_oracle():
    flux = _flux()
    if flux is None:
        pytest.skip("no Flux build with its Python bindings (set FLUXINFRA_FLUX_PREFIX; CI has "
                    "none): fluxinfra's hostlists and idsets are checked against flux-core's "
                    "where one exists")

    def ask(cases: dict) -> dict:
        out = subprocess.run([flux, "python", "-c", ORACLE], input=json.dumps(cases),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)
    return ask


# -- inputs ------------------------------------------------------------------------------------
PREFIXES = ["n", "node", "rack1-n", "", "x0", "a-b"]
SUFFIXES = ["", "", "-ib", "x"]


def _number(rng: random.Random) -> str:
    n = rng.choice([rng.randrange(12), rng.randrange(95, 105), rng.randrange(1000)])
    return f"{n:0{rng.choice([1, 1, 2, 3])}d}"


def _item(rng: random.Random) -> str:
    prefix = rng.choice(PREFIXES)
    if rng.random() < 0.4:
        return prefix + (_number(rng) if rng.random() < 0.8 else "login")
    spans = []
    for _ in range(rng.randrange(1, 4)):
        lo = _number(rng)
        hi = int(lo) + rng.randrange(-1, 12)
        spans.append(lo if rng.random() < 0.3 else f"{lo}-{hi:0{rng.choice([1, 2])}d}")
    return f"{prefix}[{','.join(spans)}]{rng.choice(SUFFIXES)}"


def hostlist_texts(rng: random.Random, n: int) -> list[str]:
    texts = []
    for _ in range(n):
        if rng.random() < 0.25:  # noise: characters hostlists are made of, anyhow
            texts.append("".join(rng.choice("n01-[],  \t9") for _ in range(rng.randrange(12))))
        else:
            texts.append(rng.choice([",", ", ", " ", ",,"]).join(
                _item(rng) for _ in range(rng.randrange(1, 4))))
    return texts


def host_names(rng: random.Random) -> list[str]:
    names = []
    for _ in range(rng.randrange(1, 9)):
        prefix, suffix = rng.choice(PREFIXES), rng.choice(["", "", "", "-ib"])
        if rng.random() < 0.1 and prefix:
            names.append(prefix + suffix)
        elif names and rng.random() < 0.5:  # often the next number of the name before
            last = re.fullmatch(r"(.*?)(\d+)", names[-1])
            names.append(f"{last[1]}{int(last[2]) + 1:0{len(last[2])}d}" if last else
                         prefix + _number(rng))
        else:
            names.append(prefix + _number(rng) + suffix)
    return names


def idset_texts(rng: random.Random, n: int) -> list[str]:
    texts = []
    for _ in range(n):
        if rng.random() < 0.3:
            texts.append("".join(rng.choice("0123-,[] 9") for _ in range(rng.randrange(10))))
            continue
        ids, parts = rng.randrange(3), []
        for _ in range(rng.randrange(1, 5)):
            lo = ids + rng.randrange(-1, 4)
            hi = lo + rng.randrange(-1, 5)
            parts.append(str(lo) if hi == lo and rng.random() < 0.7 else f"{lo}-{hi}")
            ids = hi + 1
        text = ",".join(parts)
        texts.append(f"[{text}]" if rng.random() < 0.2 else text)
    return texts + ["2147483647", "2147483648", "0-1,1-2", "01", "1-1", "", "[]", "[1", "1,,2"]


#: inputs flux-core accepts and fluxinfra refuses on purpose (the module docstring says why):
#: a second bracket group or a bracket in the suffix, a sign or blank or a dangling '-' in brackets
_REFUSED_ON_PURPOSE = re.compile(r"\][^,\s]*[\[\]]|\[[^\]]*([+\s]|-[,\]])")


def test_hostlists_decode_as_flux_decodes_them(flux_oracle) -> None:
    rng = random.Random(29)
    texts = hostlist_texts(rng, 600) + [
        "n[1-2]-ib,login", "n1,,n2", " n1 n2\tn3", "n[01-3]", "n[1-03]", "[1-2]x", "007,008",
        "n[3-1]", "n[]", "n[1,,2]", "n]", "n[1-2", "n[1--2]", "n[-1]", "n[1-2-3]", "n[1-]",
        "n[ 1]", "n[1-2][3-4]", "n[1-2]]", ""]
    flux = flux_oracle({"hostlist_decode": texts, "hostlist_encode": [], "idset_decode": [],
                        "idset_encode": []})["hostlist_decode"]
    for text, theirs in zip(texts, flux, strict=True):
        try:
            ours = hostlist.decode(text)
        except hostlist.HostlistError:
            ours = None
        if ours is None and theirs is not None:
            assert _REFUSED_ON_PURPOSE.search(text), (text, theirs)
            continue
        assert ours == theirs, text


def test_hostlists_encode_as_flux_encodes_them(flux_oracle) -> None:
    rng = random.Random(20)
    lists = [host_names(rng) for _ in range(600)] + [
        ["n3", "n1", "n2", "n10"], ["n01", "n02", "n3", "n004"], ["n1", "n01", "n2"],
        ["n9", "n10"], ["n98", "n99", "n100", "n0101"], ["n1", "n1", "n2"], ["1", "2", "3"],
        ["n1-ib", "n2-ib"], ["login", "node9", "node10"], ["n0", "n00", "n000"]]
    flux = flux_oracle({"hostlist_decode": [], "hostlist_encode": lists, "idset_decode": [],
                        "idset_encode": []})["hostlist_encode"]
    for names, theirs in zip(lists, flux, strict=True):
        assert hostlist.encode(names) == theirs, names


def test_idsets_decode_as_flux_decodes_them(flux_oracle) -> None:
    texts = idset_texts(random.Random(22), 600)
    flux = flux_oracle({"hostlist_decode": [], "hostlist_encode": [], "idset_decode": texts,
                        "idset_encode": []})["idset_decode"]
    for text, theirs in zip(texts, flux, strict=True):
        try:
            ours = idset.decode(text)
        except idset.IdsetError:
            ours = None
        assert ours == theirs, text


def test_idsets_encode_as_flux_encodes_them(flux_oracle) -> None:
    rng = random.Random(2)
    sets = [sorted({rng.randrange(40) for _ in range(rng.randrange(6))}) for _ in range(300)]
    flux = flux_oracle({"hostlist_decode": [], "hostlist_encode": [], "idset_decode": [],
                        "idset_encode": sets})["idset_encode"]
    for ids, (plain, bracketed) in zip(sets, flux, strict=True):
        assert (idset.encode(ids), idset.encode(ids, brackets=True)) == (plain, bracketed), ids


# -- properties --------------------------------------------------------------------------------
names = st.lists(st.builds(lambda p, n, w, s: f"{p}{n:0{w}d}{s}" if n >= 0 else p + s,
                           st.sampled_from(PREFIXES), st.integers(-1, 120), st.integers(1, 4),
                           st.sampled_from(["", "-ib"])).filter(bool), max_size=12)


@given(names)
def test_a_host_list_survives_encoding(hosts: list[str]) -> None:
    assert hostlist.decode(hostlist.encode(hosts)) == hosts


@given(st.lists(st.integers(0, 300)))
def test_ids_survive_encoding_both_ways(ids: list[int]) -> None:
    text = idset.encode(ids)
    assert idset.decode(text) == idset.decode(text, strict=False) == sorted(set(ids))
    assert idset.count(text) == len(set(ids))
    assert idset.decode(idset.encode(ids, brackets=True)) == sorted(set(ids))


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 5)), max_size=6))
def test_lenient_idsets_take_any_order_and_overlap(spans: list[tuple[int, int]]) -> None:
    text = ",".join(f"{lo}-{lo + n}" for lo, n in spans)
    expected = sorted({i for lo, n in spans for i in range(lo, lo + n + 1)})
    assert idset.decode(text, strict=False) == expected


@given(st.sampled_from(hostlist_texts(random.Random(7), 200)))
def test_counting_a_hostlist_agrees_with_expanding_it(text: str) -> None:
    try:
        parts = hostlist.parse(text)
    except hostlist.HostlistError as exc:
        assert str(exc)
        return
    assert hostlist.count(parts) == len(hostlist.decode(text))


def test_a_limit_is_checked_before_anything_is_listed() -> None:
    with pytest.raises(hostlist.HostlistError, match="more than 10 hosts"):
        hostlist.decode("n[0-99999999999999]", limit=10)
    with pytest.raises(idset.IdsetError, match="more than 10 ids"):
        idset.decode("0-99999999999999", strict=False, limit=10)


@pytest.mark.parametrize(("text", "why"), [
    ("n[1-2][3-4]", "more than one bracket group"), ("n[3-1]", "runs backwards"),
    ("n[1-2", "without a ']'"), ("n]", "without a '['"), ("n[x]", "not N or N-M")])
def test_a_malformed_hostlist_says_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(hostlist.HostlistError, match=re.escape(why)):
        hostlist.decode(text)


@pytest.mark.parametrize(("text", "why"), [
    ("2,1", "out of order"), ("1-1", "runs backwards"), ("01", "error parsing range"),
    ("2147483648", "more than 2147483647"), ("[[1]]", "brackets")])
def test_a_malformed_idset_says_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(idset.IdsetError, match=re.escape(why)):
        idset.decode(text)


# -- node-watch's copy -------------------------------------------------------------------------
def test_the_installer_ships_the_modules_as_they_are() -> None:
    import tomli_w._writer

    from fluxinfra.k8s.installer import FluxInstallerArgs, installer_scripts
    scripts = installer_scripts(FluxInstallerArgs())
    for name, module in (("hostlist.py", hostlist), ("idset.py", idset),
                         ("tomli_w.py", tomli_w._writer)):
        assert scripts[name] == Path(module.__file__).read_text(), module.__name__


def test_node_watch_s_fluxconf_runs_on_the_shipped_copies_alone(tmp_path) -> None:
    """As the installer pod runs it: the ConfigMap's files in one directory, a Python with
    only its standard library (-I -S: no site-packages, so no fluxinfra to fall back on)."""
    from fluxinfra.k8s.installer import FluxInstallerArgs, installer_scripts
    scripts = installer_scripts(FluxInstallerArgs())
    for name in ("fluxconf.py", "hostlist.py", "idset.py", "tomli_w.py"):
        (tmp_path / name).write_text(scripts[name])
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import fluxconf, json; "
             "print(json.dumps([fluxconf.hostlist.__file__, fluxconf.hostlist_encode("
             "['n3', 'n1', 'n2', 'n10']), fluxconf.idset_decode('[0-2,5]'), "
             "fluxconf.rv1([(0, 'n1', '0-3', ''), (1, 'n2', '0-3', '')])['execution'], "
             "fluxconf.dump_toml({'tbon': {'topo': 'kary:2'}}, header='h')]))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", probe, str(tmp_path)],
                         capture_output=True, text=True, check=True)
    where, encoded, ids, execution, toml = json.loads(out.stdout)
    assert Path(where).parent == tmp_path
    assert (encoded, ids) == ("n[3,1-2,10]", [0, 1, 2, 5])
    assert execution["nodelist"] == ["n[1-2]"]
    assert tomllib.loads(toml) == {"tbon": {"topo": "kary:2"}} and toml.startswith("# h\n")
