"""`pacific sandbox kubeconfig` / `apiserver` (Kubernetes API emulator)."""


def register(sp):
    pass
