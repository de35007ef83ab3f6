"""`harness gate --ray`: side A's blob to a node through Ray's object store (put once by the driver, got on another
node, re-hashed, written), 45 MiB (resnet18's ONNX size), three times, on a local two-node cluster
(docs/measurements.md). Run: python tools/gate_ray_blob.py"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time

import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=0)
def fetch(refs: list) -> tuple[float, float, float, str]:
    t = time.perf_counter()
    data = ray.get(refs[0])
    got = time.perf_counter() - t
    t = time.perf_counter()
    digest = hashlib.sha256(data).hexdigest()
    hashed = time.perf_counter() - t
    t = time.perf_counter()
    with open(os.path.join(tempfile.mkdtemp(), "blob.onnx"), "wb") as f:
        f.write(data)
    return got, hashed, time.perf_counter() - t, digest


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    data = os.urandom(45 * 2**20)
    sha = hashlib.sha256(data).hexdigest()
    there = NodeAffinitySchedulingStrategy(worker.node_id, soft=False)
    try:
        for _ in range(3):
            t = time.perf_counter()
            ref = ray.put(data)
            put = time.perf_counter() - t
            got, hashed, wrote, digest = ray.get(fetch.options(scheduling_strategy=there).remote([ref]))
            print(f"45 MiB: put {put * 1000:.0f} ms, get on the other node {got * 1000:.0f} ms, sha256 "
                  f"{hashed * 1000:.0f} ms, write {wrote * 1000:.0f} ms, digest ok {digest == sha}")
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
