"""The plugin's JSON codec (json's C accelerator without importing json) must
behave exactly as json.dumps/json.loads: same values, same errors."""
import json
import math
import subprocess
import threading

import pytest

from pacific.cni import plugin as proto

SAMPLES = [
    {}, [], "", 0, -1, 2**70, 1.5, -0.0, 1e300, True, False, None,
    "é ü 日本 \u2028 \U0001f600 \"quoted\" back\\slash \n\t\x00\x1f",
    {"cniVersion": "1.1.0", "name": "pacific", "plugins": [{"type": "pacific",
     "server_socket": "/run/pacific/cni.sock", "timeout": 30}]},
    {"nested": [[[[{"a": [1, 2.25, "x", None, {"b": {}}]}]]]], "k" * 300: "v" * 5000},
    {"args": {"K8S_POD_NAME": "p", "IgnoreUnknown": "1"}, "valid": [{"containerID": "c"}]},
]


@pytest.mark.parametrize("value", SAMPLES, ids=range(len(SAMPLES)))
def test_round_trip_matches_json(value):
    text = proto.json_dumps(value)
    assert json.loads(text) == value
    assert proto.json_loads(text) == value
    assert proto.json_loads(text.encode()) == value
    assert proto.json_loads(json.dumps(value, indent=2)) == value
    assert text == json.dumps(value, separators=(",", ":"))


def test_non_finite_numbers_as_json_does():
    out = proto.json_loads('[NaN, Infinity, -Infinity]')
    assert math.isnan(out[0]) and out[1] == math.inf and out[2] == -math.inf
    assert proto.json_dumps([math.inf]) == json.dumps([math.inf], separators=(",", ":"))


@pytest.mark.parametrize("text", ['', ' ', '{', '{"a": }', '{"a": 1} x', '[1,]', "{'a': 1}",
                                  '"\x01"', '\ufeff{}', 'nul', '{"a" 1}', '[1] [2]'])
def test_malformed_raises_the_same_error_as_json(text):
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(text)
    with pytest.raises(ValueError) as ours:
        proto.json_loads(text)
    assert str(ours.value) == str(theirs.value)


def test_whitespace_around_the_document_is_accepted():
    assert proto.json_loads(' \n\t{"a": [1]}\r\n ') == {"a": [1]}


def test_invalid_utf8_bytes_raise_value_error():
    with pytest.raises(UnicodeDecodeError):
        proto.json_loads(b'{"a": "\xff"}')


def test_unserializable_and_circular_values_raise_as_json_does():
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        proto.json_dumps({"a": {1}})
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        proto.json_dumps(loop)


def test_concurrent_use_from_daemon_threads():
    value = SAMPLES[14]
    text = json.dumps(value)
    errors = []

    def work():
        for _ in range(300):
            if proto.json_loads(proto.json_dumps(value)) != value or \
                    proto.json_loads(text) != value:
                errors.append("mismatch")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_plugin_process_imports_neither_json_nor_socket():
    """The start-up budget: the executed plugin loads only C modules for JSON
    and sockets (importing json + socket costs ~10 ms per pod)."""
    # Run the file's module body as the plugin does (no site), then list modules.
    probe = ("import sys; exec(compile(open(%r).read(), 'plugin', 'exec'), "
             "{'__name__': 'not_main'}); print(' '.join(sorted(sys.modules)))"
             % proto.__file__)
    out = subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", probe], check=True,
                         capture_output=True, text=True).stdout.split()
    assert "json" not in out and "socket" not in out and "re" not in out, out
