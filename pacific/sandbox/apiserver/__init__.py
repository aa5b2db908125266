"""Kubernetes API emulator for the sandbox.

Serves the real Kubernetes REST API (core/v1, apps/v1, coordination, discovery,
networking, apiextensions and custom resources) well enough for the official
`kubernetes` client and kubectl.  Modules: resources (registry), selectors,
patch, store, watch, semantics (per-kind rules), discovery, tables, rest,
handler (HTTP), server (sockets, TLS, persistence), main (CLI), sandbox
(`start_for_sandbox`).
"""
from pacific.sandbox.apiserver.sandbox import ApiServerInfo, kubeconfig_path, start_for_sandbox
from pacific.sandbox.apiserver.server import ApiServer

__all__ = ["ApiServer", "ApiServerInfo", "kubeconfig_path", "start_for_sandbox"]
