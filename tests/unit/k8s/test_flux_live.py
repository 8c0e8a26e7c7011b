"""fluxinfra's generated configs, R and scripts start real Flux instances (flux-core 0.88.0,
flux-sched 0.54.0) across real network hosts on this machine: a MiniCluster's pods and the
installer's nodes. Skipped, with the reason, without root or a Flux build (CI has neither).
Join and leave times are measured by ``benchmarks/run.py flux_membership``, not here."""

import importlib.util
import subprocess
from pathlib import Path

import pytest
from flux_live import LiveMiniCluster, LiveNodes, wait_for
from netns_hosts import flux_binary, why_not

import fluxinfra
from fluxinfra.k8s.minicluster import MiniClusterArgs

pytestmark = pytest.mark.skipif(why_not() is not None, reason=why_not() or "")


@pytest.fixture(scope="module")
def nw():
    path = Path(fluxinfra.__file__).parent / "templates" / "node-watch.py"
    spec = importlib.util.spec_from_file_location("node_watch_live", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ephemeral(command, **kw):
    return MiniClusterArgs(name="mc", namespace="ns", size=3, max_size=4, command=command, **kw)


def run_ephemeral(args, root):
    with LiveMiniCluster(args, root) as mc:
        procs = [mc.start(rank) for rank in range(args.size)]
        status = procs[0].wait(120)
        workers = [p.wait(60) for p in procs[1:]]
        return status, workers, [mc.log(r) for r in range(args.size)]


def test_an_ephemeral_minicluster_runs_its_command_across_every_broker(tmp_path):
    status, workers, logs = run_ephemeral(ephemeral("hostname"), tmp_path)
    assert status == 0 and workers == [0, 0], logs[0][-2000:]
    lead = logs[0]
    assert "R: rank[0-3]/core" in lead, "R lists all maxSize hosts"
    assert "instance up: 3 nodes" in lead
    printed = [ln for ln in lead.splitlines() if ln in ("mc-0", "mc-1", "mc-2")]
    assert sorted(printed) == ["mc-0", "mc-1", "mc-2"], lead[-2000:]
    assert "the instance shut down; done" in logs[1]


def test_the_commands_exit_status_is_rank_0s_and_the_workers_end_clean(tmp_path):
    status, workers, logs = run_ephemeral(ephemeral("sh -c 'exit 7'"), tmp_path)
    assert status == 7 and workers == [0, 0], logs[0][-2000:]
    assert "command exited with status 7" in logs[0]


def test_a_flux_view_gives_flux_to_an_image_without_it(tmp_path):
    view = tmp_path / "view"
    (view / "bin").mkdir(parents=True)
    (view / "bin/flux").symlink_to(flux_binary())
    (view / ".fluxinfra-view-ready").touch()   # what the flux-view init container leaves
    args = ephemeral("hostname", flux_view_image="localhost/flux-view:0.88.0",
                     flux_view_path=str(view))
    with LiveMiniCluster(args, tmp_path / "pods") as mc:
        env_without_flux = "/usr/sbin:/usr/bin:/sbin:/bin"
        procs = []
        for rank in range(3):
            proc = mc.start(rank)
            procs.append(proc)
        assert procs[0].wait(120) == 0, mc.log(0)[-2000:]
        assert f"PATH={env_without_flux}" not in mc.log(0)
    # and without the view the same image says what is missing
    bare = ephemeral("hostname", flux_view_image="localhost/flux-view:0.88.0",
                     flux_view_path=str(tmp_path / "no-view"))
    with LiveMiniCluster(bare, tmp_path / "bare") as mc:
        assert mc.start(0).wait(30) == 127
        assert "the Flux view at" in mc.log(0) and "incomplete" in mc.log(0)


def test_a_persistent_minicluster_grows_and_shrinks_without_restarting_brokers(tmp_path):
    args = MiniClusterArgs(name="pc", namespace="ns", mode="persistent", size=2, max_size=4)
    with LiveMiniCluster(args, tmp_path) as mc:
        first = [mc.start(rank) for rank in range(2)]
        inst = mc.instance()
        wait_for(lambda: inst.up() == "pc-[0-1]", 60)
        down = inst.flux("resource", "list", "-s", "down", "-no", "{nodelist}").strip()
        assert down == "pc-[2-3]"
        # flux-connect, from any pod (here a worker's), reaches the instance
        connect = subprocess.run(mc.hosts.argv("pc-1", [
            "env", f"PATH={Path(flux_binary()).parent}:/usr/bin:/bin", "bash",
            f"{mc.paths(1).config}/flux-connect", "getattr", "size"]),
            capture_output=True, text=True)
        assert connect.stdout.strip() == "4", connect.stderr
        job = inst.flux("submit", "--requires=host:pc-1", "sleep", "300").strip()
        wait_for(lambda: "R" in inst.flux("jobs", "-no", "{state_single}", job), 30)
        # grow: the Job's third pod starts with the stack's new size; nothing else restarts
        mc.start(2, MiniClusterArgs(**{**args.__dict__, "size": 3}))
        wait_for(lambda: inst.up() == "pc-[0-2]", 60)
        assert all(p.poll() is None for p in first), "running brokers were not restarted"
        # shrink: the pod of the highest index goes away (its PID 1 gets SIGTERM)
        mc.procs[2].terminate()
        assert mc.procs[2].wait(30) == 0
        wait_for(lambda: inst.up() == "pc-[0-1]", 60)
        assert "stopping" in mc.log(2)
        assert inst.flux("jobs", "-no", "{state_single}", job).strip() == "R", \
            "the job on another rank runs on"
        inst.flux("cancel", job)


def test_installer_nodes_join_and_leave_with_stable_ranks(nw, tmp_path):
    nodes = ["w1", "w2", "w3", "w4", "w5"]
    with LiveNodes(nw, nodes, tmp_path) as live:
        for name in ("w1", "w2", "w3"):
            assert live.join(name) == "restarted"
        inst = live.instance()
        wait_for(lambda: inst.up() == "fluxnode[0-2]", 60)
        listing = inst.flux("resource", "list", "-s", "down", "-no", "{nodelist}").strip()
        assert listing == "fluxnode[3-7]", "the instance is sized ahead to maxNodes"
        ran = inst.flux("run", "-N3", "hostname").split()
        assert sorted(ran) == ["w1", "w2", "w3"], "one job across every rank"
        job = inst.flux("submit", "--requires=host:fluxnode0", "sleep", "300").strip()
        pids = {n: live.broker_pid(n) for n in ("w1", "w2", "w3")}
        # a join starts one broker; every other node's pass leaves its broker alone
        assert live.join("w4") == "restarted"
        assert [live.node_pass(n) for n in ("w1", "w2", "w3")] == ["ensured"] * 3
        wait_for(lambda: inst.up() == "fluxnode[0-3]", 60)
        assert {n: live.broker_pid(n) for n in pids} == pids
        # a leave: rank 2 goes down and stays held; the job on rank 0 runs on
        live.leave("w3")
        wait_for(lambda: inst.up() == "fluxnode[0-1,3]", 60)
        assert [live.node_pass(n) for n in ("w1", "w2", "w4")] == ["ensured"] * 3
        assert inst.flux("jobs", "-no", "{state_single}", job).strip() == "R"
        assert nw.rank_of(live.ranks, "w3") == 2
        # the next node reuses the free rank
        assert live.join("w5") == "restarted" and nw.rank_of(live.ranks, "w5") == 2
        wait_for(lambda: inst.up() == "fluxnode[0-3]", 60)
        inst.flux("cancel", job)


def test_losing_the_lead_starts_one_new_epoch_led_by_the_lowest_rank(nw, tmp_path):
    with LiveNodes(nw, ["w1", "w2", "w3"], tmp_path) as live:
        for name in ("w1", "w2", "w3"):
            live.join(name)
        wait_for(lambda: live.instance().up() == "fluxnode[0-2]", 60)
        live.leave("w1")
        assert [live.node_pass(n) for n in ("w2", "w3")] == ["restarted", "restarted"]
        assert live.ranks["epoch"] == 2 and nw.rank_of(live.ranks, "w2") == 0
        assert nw.rank_of(live.ranks, "w3") == 1, "a new epoch closes ranks up"
        inst = live.instance()
        wait_for(lambda: inst.up() == "fluxnode[0-1]", 90)
        r_ranks = inst.flux("resource", "list", "-no", "{nodelist}", "-s", "all").strip()
        assert r_ranks == "fluxnode[0-7]"
