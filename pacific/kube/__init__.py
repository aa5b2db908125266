"""Kubernetes helpers: dict-level API calls, informers, work queue, leader election.

    from pacific.kube import client, resources as r
    from pacific.kube.informer import Informer
    from pacific.kube.workqueue import WorkQueue, run_workers
    from pacific.kube.leader import run_leader_elected
    from pacific.kube.crds import load_crds, install_crds
    from pacific.kube import errors          # NotFound, Conflict, AlreadyExists, ApiError

    api = client.load(kubeconfig)            # kubernetes.client.ApiClient
    q = WorkQueue()
    pods = Informer(api, r.PODS, on_add=lambda o: q.add(r.object_key(o)),
                    on_update=lambda a, b: q.add(r.object_key(b)),
                    on_delete=lambda o: q.add(r.object_key(o))).start()
    pods.wait_synced(30)
    run_workers(q, reconcile, n=4)           # reconcile("ns/name")

Objects are plain dicts everywhere (the model classes are too slow at 10,000 pods).
"""
