"""Shared fixtures of the vmmipc Python tests.

Every rank runs the same tests in the same order (mpiexec -n N python3 -m
pytest). A rank that fails a check must not leave the others waiting: vmmipc
waits are bounded by the comm's timeout, checks whose outcome may differ
between ranks go through all_true() so that every rank fails together, every
test starts with an MPI barrier (ranks back in step after a failure), and a
per-test watchdog ends a process that still hangs (mpiexec then ends the
others).
"""
import faulthandler
import os

import pytest
from mpi4py import MPI

import vmmipc
from support import (capsule_name, capsule_tensor, consume, pattern, read,  # noqa: F401  (for the tests)
                     write)

WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
SIZE = WORLD.Get_size()
TIMEOUT_MS = 30000          # the comm's bound on every wait for a peer
WATCHDOG_S = 240            # a test that takes longer is stuck
# Device pointers are host memory only on the stand-in.
STANDIN = "standin" in os.environ.get("VMMIPC_CUDA_DRIVER", "")


def _local_rank():
    node = WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    r = node.Get_rank()
    node.Free()
    return r


vmmipc.set_device(_local_rank() % vmmipc.device_count())


def _node_ranks():
    # The library's node: one host and one VMMIPC_NODE_ID (mpi_tests/harness/vnode.sh
    # puts ranks on virtual nodes of uneven and interleaved layouts).
    keys = WORLD.allgather((MPI.Get_processor_name(), os.environ.get("VMMIPC_NODE_ID", "")))
    return [r for r in range(SIZE) if keys[r] == keys[RANK]]


NODE = _node_ranks()        # the world ranks of this rank's node, in rank order
# This rank's neighbours in a ring of its node's ranks (itself on a node of
# one): windows map and synchronise node peers only.
NXT = NODE[(NODE.index(RANK) + 1) % len(NODE)]
PREV = NODE[(NODE.index(RANK) - 1) % len(NODE)]


def all_true(ok):
    """True on every rank only if ok is true on every rank (a collective)."""
    return WORLD.allreduce(bool(ok), op=MPI.LAND)


@pytest.fixture(autouse=True)
def watchdog():
    # Every test starts with all ranks in step, so a test that failed on some
    # ranks costs at most its own timeouts, never the next test's.
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    WORLD.Barrier()
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def comm():
    c = vmmipc.Comm(WORLD, timeout_ms=TIMEOUT_MS)
    yield c
    c.close()   # collective; a no-op if the test closed it
