"""Frozen memory's registry (graphrt.devices.frozen): its finalizer never takes the lock that
freeze() holds (the garbage collector can run it there: CI deadlocked once in
``load_params``), and it drops only entries whose owner died."""

from __future__ import annotations

import gc
import threading

import numpy as np

from graphrt.devices import frozen


def test_the_finalizer_can_run_while_freeze_holds_the_lock() -> None:
    finished = threading.Event()

    def under_the_lock() -> None:
        with frozen._lock:  # as when a collection runs inside freeze()
            frozen._forget(12345)
        finished.set()

    threading.Thread(target=under_the_lock, daemon=True).start()
    assert finished.wait(5), "the finalizer waited for the lock its own thread held"


def test_an_entry_is_forgotten_only_when_its_owner_died() -> None:
    owner = np.ones(4, np.float32)
    frozen.freeze(owner)
    frozen._forget(id(owner))  # a stale finalizer of an earlier owner with the same id
    assert frozen.is_frozen(owner)
    assert frozen.derived(owner, "k", lambda: 7) == 7
    ident = id(owner)
    del owner
    gc.collect()
    assert ident not in frozen._frozen
