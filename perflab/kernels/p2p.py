"""The copy-engine exchange's handshake kernels (p2p.cu), for perflab.train.comm.P2PComm: each a single
thread, launched on the current stream."""
from __future__ import annotations

import functools

import numpy as np

from perflab.kernels.build import module

P2P_KERNELS = ("p2p_signal", "p2p_wait")


@functools.lru_cache(maxsize=None)
def function(name: str):
    """The kernel, cached (a look-up costs a launch 5-10 us of host time, as elementwise's note)."""
    return module("p2p.cu", P2P_KERNELS).get_function(name)


def signal(addresses, count) -> None:
    """Bump the counter `count` (device, one uint64) and write it to every address in `addresses`
    (a device array of uint64 pointers into the peers' memory), after all before it in the stream."""
    function("p2p_signal")((1,), (1,), (addresses, np.int32(addresses.size), count))


def wait(flags, count, lag: int, timeout_ns: int) -> None:
    """Bump `count`, then hold the stream until every flag >= count - lag; after timeout_ns the
    kernel names the silent slot and traps (the next synchronize raises)."""
    function("p2p_wait")(
        (1,), (1,), (flags, np.int32(flags.size), count, np.int32(lag), np.int64(timeout_ns)))
