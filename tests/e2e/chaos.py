"""Chaos under pod churn in an HA sandbox (used by test_chaos.py and
bench/bench_chaos.py).

    report = run(sb, api, pods=500, rounds=2, seed=1)

Pods are created by `workers` threads through the real CNI path (at least
`pods`, and more until the last fault is in), and every third one deleted
again, while a fault thread kills, at random moments, each of:
the NB leader, the SB leader, the controller leader, one pacific-node, one
ovn-controller, `rounds` times each (every killed piece is brought back after
`heal` seconds, as a supervisor would).  Then, with everything back, `check()`:
no address held twice, no IP object and no NB row beyond the live pods, and
every live pod reaches `peers` others (all of them when there are few).
"""
from __future__ import annotations

import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from controller_fixtures import wait_until
from pacific import contract, names
from pacific.kube import resources as r
from pacific.sandbox import bringup, cnipods, controllers, nodedaemons, ovnha

NS = "chaos"


def _restore(sb, db):
    for i in range(1, ovnha.MEMBERS + 1):
        if i not in ovnha.members_running(sb, db):
            ovnha.member_start(sb, i, db)


def faults(sb, heal: float):
    """name -> action that kills it and brings it back after `heal` seconds."""
    def db_leader(db):
        def act():
            lead = ovnha.leader(sb, db)
            if lead is not None:
                ovnha.member_stop(sb, lead, db)
            time.sleep(heal)
            _restore(sb, db)
        return act

    def controller_leader():
        holder = controllers.wait_for_leader(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
        tag = holder[len(sb.name) + 1:]
        pid = sb.daemon_pid(tag)
        if pid:
            os.kill(pid, signal.SIGKILL)
        sb.stop(tag)
        time.sleep(heal)
        controllers.start_for_sandbox(sb, controllers.kubeconfig_path(sb), wait=False)

    def pacific_node():
        node = random.choice(sb.nodes)
        nodedaemons.stop(sb, node, kill=True)
        time.sleep(heal)
        nodedaemons.start(sb, node, os.path.join(sb.dir, names.SANDBOX_KUBECONFIG_UNDERLAY))

    def ovn_controller():
        node = random.choice(sb.nodes)
        pid = sb.daemon_pid(f"{node.name}/ovn-controller")
        if pid:
            os.kill(pid, signal.SIGKILL)
        time.sleep(heal)
        bringup.restart_node_daemon(sb, node, "ovn-controller")

    return {"NB leader": db_leader("nb"), "SB leader": db_leader("sb"),
            "controller leader": controller_leader, "pacific-node": pacific_node,
            "ovn-controller": ovn_controller}


def run(sb, api, pods: int, rounds: int = 2, workers: int = 6, heal: float = 3.0,
        seed: int = 1, peers: int = 3) -> dict:
    random.seed(seed)
    r.create(api, r.NAMESPACES, {"metadata": {"name": NS}})
    acts = faults(sb, heal)
    schedule = [name for name in acts for _ in range(rounds)]
    random.shuffle(schedule)
    injected: list[tuple[float, str]] = []
    t0 = time.monotonic()

    fault_errors: list[BaseException] = []

    def inject():
        try:
            for name in schedule:
                time.sleep(random.uniform(0.5, 3.0))
                injected.append((time.monotonic() - t0, name))
                acts[name]()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            fault_errors.append(e)

    failed: list[str] = []
    counter = iter(range(10**6))
    lock = threading.Lock()
    made: list[int] = []
    return_gave_up: list[int] = []

    def churn_worker():
        # at least `pods` pods, and pods keep coming until every fault was injected
        while True:
            with lock:
                i = next(counter)
                if i >= pods and not faulter.is_alive():
                    return
                made.append(i)
            name = f"p{i}"
            node = sb.nodes[i % len(sb.nodes)].name
            # a pod refused during a fault (its node's daemon down) is made again
            # after a pause, as the kubelet retries a sandbox with back-off
            for attempt in range(8):
                try:
                    cnipods.add_pod(sb, NS, name, node, api=api, timeout=120)
                    break
                except Exception as e:  # noqa: BLE001 - recorded, retried
                    failed.append(f"{name}: {e}")
                    time.sleep(1 + attempt)
            else:
                return_gave_up.append(i)
            if i % 3 == 0:
                cnipods.delete_pod(sb, NS, name, api=api)

    faulter = threading.Thread(target=inject, name="chaos-faults")
    faulter.start()
    with ThreadPoolExecutor(workers) as pool:
        for f in [pool.submit(churn_worker) for _ in range(workers)]:
            f.result()
    faulter.join()
    if fault_errors:
        raise fault_errors[0]
    # a last pass: whatever the faults left half-made is finished or removed
    for kind in ("nb", "sb"):
        _restore(sb, kind)
    controllers.start_for_sandbox(sb, controllers.kubeconfig_path(sb), wait=True)
    return {"seconds": time.monotonic() - t0, "injected": injected, "failed_attempts": failed,
            "made": len(made), "gave_up": len(return_gave_up),
            "live_expected": sum(1 for i in made if i % 3 and i not in return_gave_up)}


def check(sb, api, peers: int = 3) -> dict:
    from pacific.tools import topology
    from pacific.ovn.query import Query
    live = {p["metadata"]["name"]: p for p in r.list_(api, r.PODS, NS)[0]
            if not p["metadata"].get("deletionTimestamp")}
    wait_until(lambda: all(contract.own_record(r.get(api, r.PODS, n, NS) or {}) for n in live),
               120, interval=0.5, what="every live pod allocated")
    recs = {n: contract.own_record(r.get(api, r.PODS, n, NS)) for n in live}
    ips = [rec.ip for rec in recs.values()]
    assert len(ips) == len(set(ips)), "an address is held twice"

    def rows_clean():
        with Query(sb.nb_remote, "OVN_Northbound") as nb:
            return topology.check(topology.read(api, nb)) == []
    wait_until(rows_clean, 120, interval=1, what="NB rows matching the live pods")

    def ip_objects():
        return {i["metadata"]["name"] for i in r.list_(api, r.IPS)[0]
                if i["metadata"]["name"].endswith(f".{NS}")}
    want = {f"{n}.{NS}" for n in live}
    # a release deletes the port, then the IP object: wait as for the rows
    try:
        wait_until(lambda: ip_objects() == want, 30, interval=0.5,
                   what="IP objects of the live pods only")
    except AssertionError:
        raise AssertionError("IP objects beyond the live pods: "
                             f"{sorted(ip_objects() - want)}") from None
    names_ = sorted(live)
    unreachable = []
    for i, n in enumerate(names_):
        src = cnipods.load(sb, NS, n)
        others = names_[i + 1:] + names_[:i]
        for o in (others if len(names_) <= peers + 1 else random.sample(others, peers)):
            # one lost echo under load is not "unreachable": up to 3 tries
            if not any(sb.exec(src.netns, ["ping", "-c1", "-W2", recs[o].ip],
                               check=False).returncode == 0 for _ in range(3)):
                unreachable.append(f"{n} ({src.node}, {recs[n].ip}) -> {o} ({recs[o].ip})")
    assert not unreachable, f"unreachable: {unreachable}"
    return {"live": len(live), "checked_pairs": sum(min(peers, len(names_) - 1)
                                                   for _ in names_)}
