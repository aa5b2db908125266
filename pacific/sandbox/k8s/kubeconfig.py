"""kubeconfig files for the sandbox's clients (kubectl, the official client, Pacific)."""
import os

import yaml


def kubeconfig_dict(server: str, token: str | None, ca_file: str | None,
                    name: str = "pacific-sandbox", extra: dict[str, str] | None = None) -> dict:
    """A kubeconfig with one context `name` (current) and one per `extra` {context: server}."""
    def cluster(url):
        c = {"server": url}
        if ca_file:
            c["certificate-authority"] = os.path.abspath(ca_file)
        return c
    clusters = [{"name": name, "cluster": cluster(server)}]
    contexts = [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}]
    for ctx, url in (extra or {}).items():
        clusters.append({"name": ctx, "cluster": cluster(url)})
        contexts.append({"name": ctx, "context": {"cluster": ctx, "user": name, "namespace": "default"}})
    user = {"token": token} if token else {}
    return {"apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": name,
            "clusters": clusters, "contexts": contexts, "users": [{"name": name, "user": user}]}


def write_kubeconfig(path: str, server: str, token: str | None, ca_file: str | None,
                     name: str = "pacific-sandbox", extra: dict[str, str] | None = None) -> str:
    """Write atomically with mode 0600 (it holds the token); returns path."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(kubeconfig_dict(server, token, ca_file, name, extra), f, sort_keys=False)
    os.replace(tmp, path)
    return path
