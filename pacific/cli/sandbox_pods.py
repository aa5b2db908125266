"""`pacific sandbox pod add|delete` and `pacific sandbox exec` (real CNI path)."""


def register(sp):
    pass
