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

Failures: when NB does not answer (timeout, connection lost) the whole batch
fails at once, each submitter getting an NBWriteError naming the cause: no
submission is retried alone with the full timeout during an outage.  When the
server refuses the transaction and the error names the command to blame, only
that command's submission fails and the rest are committed again together;
when it names none, every submission is retried in its own transaction, so one
bad object fails only its own reconcile (which the work queue retries).
`failing_for()` says how long NB has been unavailable to the writer: the
controller gives up its leadership when that exceeds --nb-failure-exit (a
controller wedged on a dead NB member must not hold the Lease for an hour).

The queue is bounded (`max_pending`): a submission beyond it fails at once
("NB writer queue full"), so an outage cannot grow memory without bound as
reconciles are retried.  A `fence` (a callable) is checked right before every
commit: the controller's answers False once its leadership ended, and nothing
is written after that.

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

from ovsdbapp import exceptions as ovsdbapp_exc

from pacific.ovn.errors import OvnConnectionError, OvnTimeoutError, OvnTransactionError

LOG = logging.getLogger(__name__)

Builder = Callable[[object], object]
MAX_PENDING = 20_000
_OUTAGE = (OvnTimeoutError, OvnConnectionError, ovsdbapp_exc.TimeoutException, TimeoutError,
           ConnectionError)


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
                 batch: bool = True, txn_timeout: float = 60.0, max_pending: int = MAX_PENDING,
                 fence: Callable[[], bool] | None = None,
                 on_transaction: Callable[[int, float, bool], None] | None = None):
        """on_transaction(submissions, seconds, ok): called after each transaction
        this writer commits or fails (e.g. metrics)."""
        self.api = api
        self.on_transaction = on_transaction
        self.max_pending = max_pending
        self.fence = fence          # False: do not write (leadership ended)
        self._built: list[list] = []   # the last transaction's commands per submission
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
        self.failing_since: float | None = None   # see failing_for()

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
            if len(self._pending) >= self.max_pending:
                raise NBWriteError(f"NB writer queue full ({len(self._pending)} submissions "
                                   f"pending: NB slow or unreachable); {what or 'commands'} "
                                   "not queued")
            self._pending.append(sub)
            self._cond.notify()
        return sub.future

    def run(self, builders: Iterable[Builder], what: str = "", timeout: float | None = None) -> list:
        """submit() and wait; raises NBWriteError naming `what` on failure."""
        return self.wait(self.submit(builders, what), what, timeout)

    def wait(self, fut: Future, what: str = "", timeout: float | None = None) -> list:
        """The results of a submit()'s Future, once committed (the caller may do
        other work meanwhile); raises NBWriteError naming `what` on failure."""
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
        t0, ok = time.perf_counter(), False
        try:
            out = self._transact(subs)
            ok = True
            return out
        finally:
            if self.on_transaction is not None:
                self.on_transaction(len(subs), time.perf_counter() - t0, ok)

    def _transact(self, subs: list[_Submission]) -> list[list]:
        per_sub = []
        self._built = per_sub
        with self.api.transaction(check_error=True) as txn:
            for sub in subs:
                cmds = [b(self.api) for b in sub.builders]
                for c in cmds:
                    txn.add(c)
                per_sub.append(cmds)
        self.transactions += 1
        return [[c.result for c in cmds] for cmds in per_sub]

    @staticmethod
    def _fail(subs: list[_Submission], why: str) -> None:
        for sub in subs:
            if not sub.future.done():
                sub.future.set_exception(NBWriteError(f"NB write of {sub.what or 'commands'}: {why}"))

    def _culprit(self, batch: list[_Submission], exc: Exception) -> _Submission | None:
        """The submission whose command the error names, if it names one."""
        failed = getattr(exc, "failed_command", None) if isinstance(exc, OvnTransactionError) else None
        if failed is None:
            return None
        for sub, cmds in zip(batch, self._built):
            if any(str(c) == failed for c in cmds):
                return sub
        return None

    def failing_for(self) -> float:
        """Seconds since the oldest commit that has not succeeded began (0: the
        last one succeeded): an outage and a wedged connection, whose
        transaction hangs until its timeout, both count from the start."""
        since = self.failing_since
        return 0.0 if since is None else time.monotonic() - since

    def _commit(self, batch: list[_Submission]) -> None:
        self.submissions += len(batch)
        if self.fence is not None and not self.fence():
            self._fail(batch, "not the leader any more; nothing written")
            return
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        try:
            results = self._execute(batch)
        except _OUTAGE as exc:
            LOG.warning("NB unavailable: a batch of %d submissions not written (%s)", len(batch), exc)
            self._fail(batch, f"NB unavailable: {exc}")
            return
        except Exception as exc:
            self.failing_since = None      # NB answered (it refused): not an outage
            if len(batch) == 1:
                self._fail(batch, f"transaction failed: {exc}")
                return
            culprit = self._culprit(batch, exc)
            if culprit is not None:
                self._fail([culprit], f"transaction failed: {exc}")
                self.submissions -= len(batch) - 1   # counted again below
                self._commit([s for s in batch if s is not culprit])
                return
            # no command named: isolate the bad submission(s), one transaction each
            self.fallbacks += 1
            LOG.warning("NB batch of %d failed (%s); retrying each on its own", len(batch), exc)
            for i, sub in enumerate(batch):
                try:
                    sub.future.set_result(self._execute([sub])[0])
                except _OUTAGE as exc1:
                    self._fail(batch[i:], f"NB unavailable: {exc1}")
                    return
                except Exception as exc1:
                    LOG.warning("NB transaction for %s failed: %s", sub.what or "commands", exc1)
                    self._fail([sub], f"transaction failed: {exc1}")
            return
        self.failing_since = None
        if len(batch) > 1:
            LOG.debug("NB batch: %d submissions in one transaction", len(batch))
        for sub, res in zip(batch, results):
            sub.future.set_result(res)
