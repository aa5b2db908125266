"""Build a `kubernetes.client.ApiClient` from a kubeconfig or the in-cluster config.

    from pacific.kube import client
    api = client.load("/run/pacific-sandbox/default/kubeconfig")  # or None

Order: the explicit path, else $KUBECONFIG, else the in-cluster service account.
Each call returns a new ApiClient (own connection pool) and never touches the
kubernetes package's global default configuration.
"""

from __future__ import annotations

import logging
import os

import kubernetes.client
import kubernetes.config
from kubernetes.config.config_exception import ConfigException

log = logging.getLogger(__name__)


class KubeconfigError(RuntimeError):
    """No usable kubeconfig or in-cluster configuration was found."""


def load(kubeconfig: str | None = None) -> kubernetes.client.ApiClient:
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    if path:
        # KUBECONFIG may be a colon separated list; the client takes the first.
        first = path.split(os.pathsep)[0]
        if not os.path.exists(first):
            raise KubeconfigError(f"kubeconfig {first!r} does not exist")
        try:
            api = kubernetes.config.new_client_from_config(config_file=first,
                                                           persist_config=False)
        except ConfigException as e:
            raise KubeconfigError(f"kubeconfig {first!r} is not usable: {e}") from e
        log.debug("kubernetes client for %s from %s", api.configuration.host, first)
        return api
    conf = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=conf)
    except ConfigException as e:
        raise KubeconfigError(
            "no kubeconfig given (argument or $KUBECONFIG) and not running in a "
            f"cluster: {e}") from e
    return kubernetes.client.ApiClient(conf)
