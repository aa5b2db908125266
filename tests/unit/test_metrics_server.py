"""pacific.metrics: the /metrics, /healthz, /readyz listener (loopback only)."""
import socket
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, Counter

from pacific import metrics as m


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate()}


@pytest.fixture
def registry():
    reg = CollectorRegistry()
    c = Counter("pacific_test_things", "things", ["kind"], registry=reg)
    c.labels("a").inc(3)
    return reg


@pytest.fixture
def server(registry):
    state = {"ready": (False, "NB not connected"), "alive": (True, "loop ran 0.1 s ago")}

    def check(which):
        def run():
            if isinstance(state[which], Exception):
                raise state[which]
            return state[which]
        return run
    srv = m.MetricsServer(("127.0.0.1", 0), check("alive"), check("ready"),
                          registry=registry).start()
    try:
        yield srv, state
    finally:
        srv.stop()


@pytest.mark.parametrize("text,want", [
    ("127.0.0.1:9476", ("127.0.0.1", 9476)),
    (":9477", ("", 9477)),
    ("[::1]:9476", ("::1", 9476)),
    ("::1:9476", ("::1", 9476)),          # unbracketed: the last colon is the port
    ("localhost:0", ("localhost", 0)),
    ("", None),
    (None, None),
])
def test_parse_address(text, want):
    assert m.parse_address(text) == want


@pytest.mark.parametrize("bad", ["9476", "host:", "host:port", "1.2.3.4:65536", "h:-1"])
def test_parse_address_refuses_with_the_format(bad):
    with pytest.raises(m.MetricsError, match="is not HOST:PORT"):
        m.parse_address(bad)


def test_metrics_are_prometheus_text(server):
    srv, _ = server
    assert srv.address[1] != 0, "port 0 must report the bound port"
    samples = m.scrape(srv.url)
    assert m.value(samples, "pacific_test_things_total", kind="a") == 3
    assert m.total(samples, "pacific_test_things_total") == 3
    status, body = m.get(srv.url + "/metrics?name[]=pacific_test_things_total")
    assert status == 200 and "pacific_test_things_total" in body


def test_health_paths_answer_the_checks(server):
    srv, state = server
    assert m.get(srv.url + "/healthz") == (200, "ok: loop ran 0.1 s ago\n")
    assert m.get(srv.url + "/readyz") == (503, "NB not connected\n")
    state["ready"] = (True, "leader")
    assert m.get(srv.url + "/readyz") == (200, "ok: leader\n")

    state["alive"] = ValueError("cache gone")
    status, body = m.get(srv.url + "/healthz")
    assert status == 503 and "ValueError: cache gone" in body


def test_unknown_path_is_404_and_names_the_paths(server):
    srv, _ = server
    status, body = m.get(srv.url + "/nope")
    assert status == 404 and "/metrics" in body and "/readyz" in body
    assert m.get(srv.url + "/")[0] == 200


def test_taken_port_raises_or_is_retried(registry):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    with pytest.raises(m.MetricsError, match=f"127.0.0.1:{port}.*--metrics-address"):
        m.MetricsServer(("127.0.0.1", port), registry=registry).start()

    srv = m.MetricsServer(("127.0.0.1", port), registry=registry).start(retry_interval=0.05)
    try:
        assert not srv.serving
        holder.close()
        deadline = time.monotonic() + 5
        while not srv.serving and time.monotonic() < deadline:
            time.sleep(0.02)
        assert srv.serving
        assert m.get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    finally:
        holder.close()
        srv.stop()
    assert "metrics-bind" not in _threads() and "metrics-http" not in _threads()


def test_stop_releases_the_port_and_threads(registry):
    srv = m.MetricsServer(("127.0.0.1", 0), registry=registry).start()
    port = srv.address[1]
    srv.stop()
    srv.stop()   # idempotent
    assert "metrics-http" not in _threads()
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))   # free again
    finally:
        s.close()


def test_scrape_of_a_failing_endpoint_says_so(server):
    srv, _ = server
    with pytest.raises(m.MetricsError, match="answered 404"):
        m.scrape(srv.url + "/nope")
