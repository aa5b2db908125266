"""pacific.kube.versions: one code path for EndpointSlice v1 and v1beta1."""
import pytest

from pacific.kube import errors, resources, versions


class FakeDiscovery:
    """Answers GET /apis/<group> as kube-apiserver does (an APIGroup document)."""

    def __init__(self, served: dict[str, list[str]]):
        self.served = served

    def __call__(self, api, method, path, *a, **kw):
        assert method == "GET" and path.startswith("/apis/")
        group = path[len("/apis/"):]
        if group not in self.served:
            raise errors.NotFound(404, "NotFound", "the server could not find the requested resource",
                                  method, path)
        vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in self.served[group]]
        return {"kind": "APIGroup", "name": group, "versions": vs, "preferredVersion": vs[0]}


@pytest.mark.parametrize("served,want", [
    (["v1beta1"], "v1beta1"),            # 1.20
    (["v1", "v1beta1"], "v1"),           # 1.21 .. 1.24
    (["v1"], "v1"),                      # 1.25 and later
])
def test_endpointslices_follow_what_the_server_serves(monkeypatch, served, want):
    monkeypatch.setattr(resources, "request", FakeDiscovery({"discovery.k8s.io": served}))
    res = versions.endpointslices(object())
    assert res.version == want and res.path("ns") == \
        f"/apis/discovery.k8s.io/{want}/namespaces/ns/endpointslices"


def test_no_endpointslice_api_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(resources, "request", FakeDiscovery({}))
    with pytest.raises(errors.ApiError, match="serves no EndpointSlice API"):
        versions.endpointslices(object())


def test_endpoint_node_reads_both_versions():
    assert versions.endpoint_node({"addresses": ["10.0.0.1"], "nodeName": "n1"}) == "n1"
    assert versions.endpoint_node({"addresses": ["10.0.0.1"],
                                   "topology": {"kubernetes.io/hostname": "n2"}}) == "n2"
    assert versions.endpoint_node({"addresses": ["10.0.0.1"]}) is None
