"""A rank that stops answering ends the job, within --timeout seconds, with one line per rank.

NCCL, MPI and the p2p kernel all wait forever for a peer that never comes (a rank stopped, a node
lost). Each rank of a training run on several ranks runs a watchdog thread. The loop arms it around
every step, epoch end and evaluation (each holds the run's exchanges, wherever the host then waits:
in MPI, in a stream's synchronize, on a loss read) and disarms it after. A step armed longer than the
timeout means a peer has not answered: the thread names the silent ranks, the exchange, the epoch and
batch, and ends the process with exit status 3; the launcher ends the rest. The silent rank is found
on a board of heartbeats every rank of a node maps (MPI shared memory): each watchdog writes the time
there twice a second, and a stopped process's watchdog stops with it. The run's first step is not
armed: it compiles kernels and captures graphs, which may take longer than any exchange. Where a call
holds Python's lock while it waits (so this thread cannot run), faulthandler's C timer, kept a little
past the timeout while armed, prints every thread's stack and ends the process.
"""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

TIMEOUT_S = 60.0  # the default of --timeout: well past any step's time, short of a user's patience
BEAT_S = 0.5      # how often a watchdog writes its heartbeat
STALE_S = 5.0     # a heartbeat older than this (or half the timeout) is a rank that no longer runs
EXIT_STATUS = 3
BACKSTOP_S = 5.0  # past the timeout, faulthandler ends a process whose watchdog could not run
EXCHANGES = {"mpi": "the host MPI all-reduce", "nccl": "the NCCL all-reduce", "p2p": "the p2p exchange",
             "nccl-half": "the NCCL all-reduce (in half precision)",
             "shm": "the shared-memory all-reduce", "hierarchical": "the hierarchical all-reduce",
             "cuda-mpi": "the CUDA-aware MPI all-reduce"}
FIELDS = 5  # a board row: heartbeat (wall seconds), epoch, batch, steps begun, said (1: it printed its line)
GATHER_S = 10.0  # the most a rank that has spoken waits for the others alive on its node to speak too


def say_line(text: str) -> None:
    """One line to stderr in one write, flushed: written apart from its newline, two ranks' lines reached the
    launcher as one ("...(--timeout 4)perflab: error: rank 0: ..."), and a reader saw one rank speak."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class Idle:
    """One rank, or no watchdog: arming costs nothing."""

    def arm(self, epoch: int, batch: int | None, batches: int) -> None:
        pass

    def watch_over(self, where: str) -> None:
        pass

    def disarm(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, kind, *_) -> None:
        """After the run: close (collective) when it ended well; where it raised, the other ranks may never
        come, so only the thread stops."""
        if kind is None:
            self.close()
        else:
            self.stop()

    def stop(self) -> None:
        pass


class Watchdog(Idle):
    """`patient`: for work whose waits have no bound of their own (a sweep's ranks wait for a point's ranks
    between points, as long as the point takes): armed by watch_over, it ends the job only when a rank of
    this node has shown no sign of life for the timeout, not when a wait lasts that long (and, armed for
    minutes, sets no faulthandler backstop). A rank stopped on another node is not seen there."""

    def __init__(self, comm, timeout_s: float = TIMEOUT_S, patient: bool = False):
        if not timeout_s > 0:
            raise ValueError(f"--timeout must be a positive number of seconds, got {timeout_s!r}")
        self.comm, self.timeout, self.patient, self.where = comm, float(timeout_s), patient, ""
        self.stale = min(STALE_S, self.timeout / 2)  # a heartbeat older than this: a rank that no longer runs
        self.exchange = EXCHANGES.get(comm.strategy, "the gradient exchange")
        node = comm.comm.Split_type(comm.MPI.COMM_TYPE_SHARED)
        self.node_ranks = node.allgather(comm.rank)  # the run's rank of each row of the board
        self.window = comm.MPI.Win.Allocate_shared(FIELDS * 8, 8, comm=node)
        self.board = [np.frombuffer(self.window.Shared_query(r)[0], np.float64, FIELDS) for r in range(node.Get_size())]
        self.row = self.board[node.Get_rank()]
        self.row[:] = (time.time(), -1, -1, 0, 0)
        self.node = node
        node.Barrier()
        self.armed_since, self.steps, self.epoch, self.batch, self.batches = None, 0, -1, None, 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.watch, name="perflab watchdog", daemon=True)
        self.thread.start()

    def arm(self, epoch: int, batch: int | None, batches: int) -> None:
        """A step that waits on every rank begins: epoch, batch (None: the epoch's end or a whole epoch's
        graph). Kept to a few stores: it runs every batch."""
        self.steps += 1
        self.epoch, self.batch, self.batches = epoch, batch, batches
        self.row[1], self.row[2], self.row[3] = epoch, -1 if batch is None else batch, self.steps
        self.armed_since = time.monotonic() if self.steps > 1 else None  # the first compiles and captures

    def watch_over(self, where: str) -> None:
        """(patient) From now on, a rank of this node silent for the timeout ends the job, naming `where`."""
        self.where, self.armed_since = where, time.monotonic()

    def disarm(self) -> None:
        self.armed_since = None

    def watch(self) -> None:
        import faulthandler
        last = time.monotonic()
        while not self.stopping.wait(BEAT_S):
            self.row[0] = time.time()
            if time.monotonic() - last > self.stale and self.armed_since is not None:
                self.armed_since = time.monotonic()  # this rank was the one stopped: resumed, it blames no one
            last = time.monotonic()
            since = self.armed_since
            if since is None:
                faulthandler.cancel_dump_traceback_later()
                continue
            if self.patient:
                lost = self.silent(self.timeout)
                if lost:
                    self.say(f"{'; '.join(lost)}, {self.where}")
                continue
            if time.monotonic() - since > self.timeout:
                self.fire(time.monotonic() - since)
            # the backstop, where a call that holds the GIL keeps this thread from running: C's own timer
            # prints every thread's stack and ends the process a little past the timeout
            faulthandler.dump_traceback_later(self.timeout + BACKSTOP_S, exit=True)
        faulthandler.cancel_dump_traceback_later()

    def silent(self, stale: float | None = None) -> list[str]:
        """The ranks of this node whose watchdog stopped beating (for `stale` seconds: by default the
        blame's), or (training) that never reached this step."""
        now, out = time.time(), []
        for rank, (beat, epoch, batch, steps, _) in zip(self.node_ranks, [row.copy() for row in self.board]):
            if rank == self.comm.rank:
                continue
            last = f"last at epoch {int(epoch)}" + (f", batch {int(batch) + 1}" if batch >= 0 else "")
            if now - beat > (stale or self.stale):  # a patient watchdog's ranks train nothing: no epoch to name
                out.append(f"rank {rank} silent (no sign of life for {now - beat:.0f} s"
                           + ("" if self.patient else f"; {last}") + ")")
            elif steps < self.steps and stale is None:
                out.append(f"rank {rank} alive but behind ({last})")
        return out

    def fire(self, waited: float) -> None:
        silent = self.silent()
        who = ("; ".join(silent) if silent else
               f"every rank of this node is alive: a rank on another node is silent ({self.comm.size} ranks, "
               f"{len(self.node_ranks)} here)")
        where = (f"epoch {self.epoch}, batch {self.batch + 1}/{self.batches}" if self.batch is not None else
                 f"epoch {self.epoch} (its batches in one CUDA graph, or its end)")
        self.say(f"no answer for {waited:.0f} s in {self.exchange} at {where}: {who}")

    def say(self, what: str) -> None:
        """This rank's one line, then the job's end once the others alive here have said theirs."""
        say_line(f"perflab: error: rank {self.comm.rank}: {what}; ending the job (--timeout {self.timeout:g})")
        sys.stdout.flush()
        self.row[4] = 1
        self.gather(time.monotonic() + min(GATHER_S, self.timeout))
        os._exit(EXIT_STATUS)

    def gather(self, until: float) -> None:
        """Wait until every rank of this node that is alive has said its line too (the launcher ends them all
        once one exits), or `until`; the heartbeat keeps going meanwhile, so this rank is not taken for silent."""
        while time.monotonic() < until:
            self.row[0] = time.time()
            rows = [row.copy() for row in self.board]
            # alive: a heartbeat within STALE_S, not the blame's tighter `stale`: on a loaded host (p = 3 on two
            # cores) a waiting rank's beat lagged past timeout / 2, and it was ended before its line
            if all(said or time.time() - beat > max(self.stale, STALE_S) for beat, _, _, _, said in rows):
                break
            time.sleep(0.1)
        time.sleep(0.2)  # the last line's way through the launcher

    def stop(self) -> None:
        self.armed_since = None
        self.stopping.set()
        self.thread.join()

    def close(self) -> None:
        """Stop the thread and free the board (collective: every rank's run ended)."""
        self.stop()
        self.node.Barrier()
        self.window.Free()
        self.node.Free()


def for_run(comm, timeout_s: float | None, patient: bool = False) -> Idle:
    """The watchdog of a run on `comm`: none for one rank (nothing to wait for) or timeout None."""
    if timeout_s is None or comm.size == 1:  # (every exchange of several ranks runs over MPI)
        return Idle()
    return Watchdog(comm, timeout_s, patient)
