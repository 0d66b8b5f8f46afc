"""pytest plugin for scripts/gpu/python_diag.sh: after every test (and its
fixtures' teardown), one context-wide synchronise (vmmipc.synchronize, that
is cuCtxSynchronize) tells whether the test left a device fault behind. A
fault is sticky, so the first test after which a rank reports one is the
test that left it (or queued the work that faulted later)."""
import os
import time

import pytest


def _rank():
    for k in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        if k in os.environ:
            return os.environ[k]
    return "?"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    import vmmipc
    t0 = time.perf_counter()
    try:
        vmmipc.synchronize()
        what = "ok"
    except vmmipc.Error as e:
        what = f"FAULT {e}"
    ms = (time.perf_counter() - t0) * 1e3
    print(f"\nfault-probe: rank {_rank()} after {item.nodeid}: {what} ({ms:.1f} ms)", flush=True)
