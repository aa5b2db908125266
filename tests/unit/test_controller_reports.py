"""controller/reports.py: a problem is told once per object and text."""
from pacific.controller.reports import Reports

SVC = {"metadata": {"name": "svc", "namespace": "atk", "uid": "u1"}}


def test_told_once_then_again_when_the_text_changes():
    rep = Reports()
    assert rep.due("atk/svc", SVC, "endpoint 1 ignored")
    assert not rep.due("atk/svc", SVC, "endpoint 1 ignored")
    assert rep.due("atk/svc", SVC, "endpoints 1, 2 ignored")


def test_nothing_wrong_is_not_told_and_a_recurrence_is():
    rep = Reports()
    assert rep.due("atk/svc", SVC, "x")
    assert not rep.due("atk/svc", SVC, "")
    assert rep.due("atk/svc", SVC, "x")


def test_not_counted_as_told_without_an_object():
    rep = Reports()
    assert not rep.due("atk/svc", None, "x")      # reconciled before the Service's cache
    assert rep.due("atk/svc", SVC, "x")


def test_a_new_object_under_the_same_key_is_told_again():
    rep = Reports()
    assert rep.due("atk/svc", SVC, "x")
    assert rep.due("atk/svc", {"metadata": {"uid": "u2"}}, "x")
    rep.forget("atk/svc")
    assert rep.due("atk/svc", {"metadata": {"uid": "u2"}}, "x")
