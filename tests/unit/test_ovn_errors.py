"""Pure logic of pacific.ovn: owner external_ids and error messages."""

from pacific import names
from pacific.ovn import OvnConnectionError, OvnTimeoutError, OvnTransactionError, Owner
from pacific.ovn.base import owner_ids


def test_owner_external_ids_use_names_keys():
    o = Owner(names.OWNER_KIND_POD, "default/web-0")
    assert o.external_ids() == {names.EXT_OWNER_KIND: "Pod",
                                names.EXT_OWNER: "default/web-0"}
    ids = owner_ids(o, {names.EXT_SUBNET: "ovn-default"}, created_by="ctl")
    assert ids[names.EXT_SUBNET] == "ovn-default"
    assert ids[names.EXT_CREATED_BY] == "ctl"


def test_transaction_error_names_failed_command_and_remote():
    e = OvnTransactionError("unix:/x/nb.sock", ["ls-add a", "lsp-add b p"],
                            "RowNotFound: Cannot find Logical_Switch b",
                            failed_command="lsp-add b p")
    assert str(e) == ("OVSDB transaction on unix:/x/nb.sock failed: command "
                      "lsp-add b p: RowNotFound: Cannot find Logical_Switch b")
    assert e.commands == ["ls-add a", "lsp-add b p"]


def test_transaction_error_summarises_long_transactions():
    e = OvnTimeoutError("tcp:127.0.0.1:6641", [f"c{i}" for i in range(1000)],
                        "not committed within 5s")
    msg = str(e)
    assert "transaction of 1000 commands [c0; c1; c2; ... (997 more)]" in msg
    assert isinstance(e, OvnTransactionError)
    assert len(msg) < 200


def test_connection_error_message():
    e = OvnConnectionError("unix:/nope", "OVN_Northbound", "refused")
    assert str(e) == "cannot connect to OVSDB OVN_Northbound at unix:/nope: refused"
