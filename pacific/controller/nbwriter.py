"""Batched OVN Northbound writer: many reconciles, one transaction.

Every reconciler that needs to change the NB database hands the writer a list
of *command builders* (callables ``build(api) -> ovsdbapp command``) and waits
for the result::

    writer = NBWriter(nb_api, max_batch=500, max_delay=0.001)
    writer.start()
    writer.run([lambda api: api.ls_add("s1", may_exist=True)], what="subnet s1")
    writer.stop()

A single writer thread collects the submissions that arrive while the previous
transaction is in flight (plus up to ``max_delay`` seconds after the first one)
and commits them together in ONE OVSDB transaction, so under load (hundreds of
pods being reconciled by concurrent workers) each transaction carries many
objects.  Commands are built in the writer thread, just before the commit, so
they see the IDL state of that moment.

If a batched transaction fails, the writer retries every submission of the
batch in its own transaction: one bad object fails only its own reconcile
(which the work queue retries), never its neighbours.

``max_batch=1`` (or ``batch=False``) turns batching off: one transaction per
submission; the benchmark uses that as its baseline.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable, Iterable

LOG = logging.getLogger(__name__)

Builder = Callable[[object], object]


class NBWriteError(RuntimeError):
    """A submission's NB transaction failed; the message names what and why."""


class _Submission:
    __slots__ = ("builders", "what", "future")

    def __init__(self, builders: list[Builder], what: str):
        self.builders = builders
        self.what = what
        self.future: Future = Future()


class NBWriter:
    """Collects NB command builders from many threads into batched transactions."""

    def __init__(self, api, max_batch: int = 500, max_delay: float = 0.001,
                 batch: bool = True, txn_timeout: float = 60.0):
        self.api = api
        self.max_batch = max(1, int(max_batch)) if batch else 1
        self.max_delay = max_delay if batch else 0.0
        self.txn_timeout = txn_timeout
        self._pending: list[_Submission] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        # statistics (read by the benchmark and logged at stop)
        self.transactions = 0
        self.submissions = 0
        self.fallbacks = 0

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> "NBWriter":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="nb-writer", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        LOG.info("NB writer stopped: %d submissions in %d transactions (%d batch fallbacks)",
                 self.submissions, self.transactions, self.fallbacks)

    # -- API -----------------------------------------------------------------
    def submit(self, builders: Iterable[Builder], what: str = "") -> Future:
        """Queue commands for the next transaction; the Future gets the list of results."""
        sub = _Submission(list(builders), what)
        if not sub.builders:
            sub.future.set_result([])
            return sub.future
        with self._cond:
            if self._stopping:
                raise NBWriteError(f"NB writer is stopped; cannot write {what or 'commands'}")
            self._pending.append(sub)
            self._cond.notify()
        return sub.future

    def run(self, builders: Iterable[Builder], what: str = "", timeout: float | None = None) -> list:
        """submit() and wait; raises NBWriteError naming `what` on failure."""
        fut = self.submit(builders, what)
        wait = timeout or self.txn_timeout * 2
        try:
            return fut.result(timeout=wait)
        except FutureTimeout:
            raise NBWriteError(f"NB write {what or '(unnamed)'}: no answer within {wait:g} s "
                               "(writer stalled or NB unreachable)") from None

    # -- writer thread -------------------------------------------------------
    def _take_batch(self) -> list[_Submission] | None:
        with self._cond:
            while not self._pending and not self._stopping:
                self._cond.wait()
            if not self._pending:
                return None  # stopping and drained
            if self.max_delay and len(self._pending) < self.max_batch and not self._stopping:
                deadline = time.monotonic() + self.max_delay
                while len(self._pending) < self.max_batch and not self._stopping:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            batch = self._pending[: self.max_batch]
            del self._pending[: self.max_batch]
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            try:
                self._commit(batch)
            except Exception as exc:  # pragma: no cover - defensive: never kill the thread
                LOG.exception("NB writer: unexpected error")
                for sub in batch:
                    if not sub.future.done():
                        sub.future.set_exception(exc)

    def _execute(self, subs: list[_Submission]) -> list[list]:
        """One transaction for all `subs`; returns per-submission command results."""
        per_sub = []
        with self.api.transaction(check_error=True) as txn:
            for sub in subs:
                cmds = [b(self.api) for b in sub.builders]
                for c in cmds:
                    txn.add(c)
                per_sub.append(cmds)
        self.transactions += 1
        return [[c.result for c in cmds] for cmds in per_sub]

    def _commit(self, batch: list[_Submission]) -> None:
        self.submissions += len(batch)
        try:
            results = self._execute(batch)
        except Exception as exc:
            if len(batch) == 1:
                sub = batch[0]
                sub.future.set_exception(NBWriteError(f"NB transaction for {sub.what or 'commands'} failed: {exc}"))
                return
            # isolate the bad submission(s): one transaction each
            self.fallbacks += 1
            LOG.warning("NB batch of %d failed (%s); retrying each on its own", len(batch), exc)
            for sub in batch:
                try:
                    sub.future.set_result(self._execute([sub])[0])
                except Exception as exc1:
                    LOG.warning("NB transaction for %s failed: %s", sub.what or "commands", exc1)
                    sub.future.set_exception(
                        NBWriteError(f"NB transaction for {sub.what or 'commands'} failed: {exc1}"))
            return
        if len(batch) > 1:
            LOG.debug("NB batch: %d submissions in one transaction", len(batch))
        for sub, res in zip(batch, results):
            sub.future.set_result(res)
