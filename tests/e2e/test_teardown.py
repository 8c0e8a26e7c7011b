"""A bed leaves the machine as it found it: mounts, links, addresses, routes, nftables and
iptables rules, the kernel settings a kubelet or CNI plugin touches, cgroups, processes and the
files a node writes outside its directories, compared before start and after teardown (the
session's own bed is checked the same way when the session ends)."""

from __future__ import annotations

import os
import time

import kubebed
from e2e_cluster import Cluster
from kubebed import hoststate
from kubebed.images import PAUSE_IMAGE

POD = """
apiVersion: v1
kind: Pod
metadata: {{name: busy, namespace: default}}
spec:
  nodeName: {node}
  containers:
  - name: main
    image: {image}
    imagePullPolicy: Never
    volumeMounts: [{{name: scratch, mountPath: /scratch}}]
  volumes: [{{name: scratch, emptyDir: {{medium: Memory}}}}]
"""


def test_a_bed_with_running_pods_leaves_nothing_behind(cluster: Cluster, real_node: str,
                                                       tmp_path) -> None:
    """A second bed beside the session's: a pod with a token volume and a memory emptyDir runs
    on its node (mounts, a network namespace, veths, cgroups); then it is taken down."""
    before = hoststate.snapshot()
    bed = kubebed.Bed.up(f"e2e-second-{os.getpid()}")
    try:
        second = Cluster(bed.kubeconfig, tmp_path, bed, owned=False)
        second.apply(POD.format(node=bed.node_name, image=PAUSE_IMAGE))
        second.kubectl("wait", "--for=condition=Ready", "pod/busy", "--timeout=90s")
        during, _ = hoststate.attribute(hoststate.changes(before, hoststate.snapshot()),
                                        [bed.layout])
        seen = " ".join(during)
        for made in (bed.layout.lan_bridge, bed.layout.nft_table, bed.layout.node_ip,
                     bed.layout.cgroup_root.lstrip("/"), f"fxkv{bed.layout.slot}n0"):
            assert made in seen, f"the check does not see {made} while the bed runs: {during}"
    finally:
        started = time.monotonic()
        bed.down()
        took = time.monotonic() - started
    ours, theirs = hoststate.attribute(hoststate.changes(before, hoststate.snapshot()),
                                       [bed.layout])
    assert not ours, "left behind:\n" + "\n".join(ours)
    print(f"\nsecond bed: started in {bed.record['timings']['nodes_ready']:.1f}s, down in "
          f"{took:.1f}s; {len(theirs)} changes by others meanwhile")
