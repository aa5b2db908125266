# Pacific: the two commands a newcomer needs are `make demo` and `make test`.
# Both first run `setup`, which is idempotent: Debian packages are installed only
# when missing, the virtualenv only when pyproject.toml changed.
SHELL := /bin/bash
PY := .venv/bin/python
APT_PKGS := openvswitch-switch python3-openvswitch ovn-central ovn-host iproute2 nftables iptables \
	ethtool iperf3 iputils-ping tcpdump containernetworking-plugins python3 python3-venv procps openssl graphviz \
	containerd runc busybox-static util-linux dnsmasq-base gcc libc6-dev

.PHONY: setup system kubernetes ovs demo test test-unit test-e2e bench down clean image conformance conformance-bin

setup: system .venv/.installed kubernetes ovs pacific/cni/pacific-cni

# The CNI plugin's shim (decision 0044): static, so it runs on any node's libc
pacific/cni/pacific-cni: pacific/cni/shim.c | system
	cc -O2 -Wall -Wextra -Werror -s -static -o $@ $<

# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl v1.20.2
# built offline from Debian's source package, etcd from Debian: once per machine
# (cached under /var/cache/pacific/kubernetes; about 4 minutes the first time)
kubernetes:
	@hack/build-kubernetes.sh

# Open vSwitch 4.0 and OVN 26.03 built offline from Debian's source packages, with the
# C JSON parser for Python: once per machine (cached under /var/cache/pacific/ovs;
# about 5 minutes the first time).  The sandbox and the tests run them; Debian 12's
# packages (OVS 3.1, OVN 23.03) stay installed: `pacific sandbox up --ovs-prefix /usr`
ovs: system
	@hack/build-ovs-ovn.sh

system:
	@missing=""; for p in $(APT_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing Debian packages:$$missing"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

.venv/.installed: pyproject.toml
	@test -x $(PY) || python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -e '.[test]'
	@touch $@

# Pacific's container image as an OCI archive (_output/pacific-image.tar), without a
# container engine: debootstrap from Debian's archive + Pacific's wheels (hack/build-image.sh)
image: setup
	@hack/build-image.sh

demo: setup
	.venv/bin/pacific demo

# the image too: tests/e2e/test_deploy_mode.py runs Pacific from it (a no-op when
# the archive is up to date with pacific/); and Kubernetes' e2e.test, whose four
# pod-network [Conformance] checks tests/e2e/test_upstream_networking.py runs.  Two workers: the modules with a
# Kubernetes sandbox one after the other on one, the unit tests and the modules
# without one beside them (tests/conftest.py says which and why)
PYTEST_WORKERS = -n 2 --dist loadgroup
test: setup image conformance-bin
	.venv/bin/pytest -q -p no:cacheprovider $(PYTEST_WORKERS) --durations=30 tests/unit tests/e2e

test-unit: setup
	.venv/bin/pytest -q -p no:cacheprovider tests/unit

test-e2e: setup image conformance-bin
	.venv/bin/pytest -q -p no:cacheprovider $(PYTEST_WORKERS) tests/e2e

conformance-bin: setup
	@hack/build-conformance.sh

# Kubernetes' own [sig-network] e2e tests (v1.20.2's e2e.test and agnhost, built
# offline once per machine by hack/build-conformance.sh, about 4 minutes the first
# time) against a sandbox of kubelet nodes; the selection and why each skip is a
# skip: docs/conformance.md.  CONFORMANCE_ARGS, e.g. --isolation or --focus RE
conformance: setup conformance-bin
	$(PY) -m pacific.sandbox.conformance $(CONFORMANCE_ARGS)

bench: setup
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

down: setup
	.venv/bin/pacific sandbox down

clean:
	rm -rf .venv *.egg-info build
