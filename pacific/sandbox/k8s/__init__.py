"""The sandbox's real Kubernetes: control plane (controlplane.py, pki.py, bins.py),
the forwarder that lets node namespaces reach the API server (forward.py), the
per-node pod runner (podrunner.py), and their wiring into a Sandbox (sandbox.py)."""
