"""Timing helpers below everything that times: the kernels' tuner, the benchmarks, the ceilings.

Device time: CUDA events around a CUDA graph of many calls (the host's launch cost left out),
or around single calls; host time: the monotonic clock with a caller's synchronization.
"""
from __future__ import annotations

import statistics
import time


def graph_replays_ms(cp, fn, calls: int, done, before=None) -> list[float]:
    """Device milliseconds of one fn() call in each replay: `calls` calls captured in a CUDA graph
    and replayed between events (so the host's launch overhead is not in the number) until
    done(replays so far) is true. The calls run once before capture: a first call may make what
    capture does not allow (the wgmma GEMMs' tensor maps, per operand set of a rotation). The
    caller's stream is waited for first: its pending work may read or write what fn() does (the
    trainer tuning a new batch size while its last step still runs: x3tf32's weights after two
    epochs came out wrong: docs/DECISIONS.md, D14). `before()`, where given,
    runs before each timed replay (ranks starting a collective's replays together)."""
    cp.cuda.get_current_stream().synchronize()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        for _ in range(calls):
            fn()
        stream.begin_capture()
        for _ in range(calls):
            fn()
        graph = stream.end_capture()
        graph.launch(stream)
        times = []
        while not done(len(times)):
            if before:
                before()
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop) / calls)
    return times


def time_graph_ms(cp, fn, calls: int = 10, repeats: int = 10, before=None) -> float:
    """Median device milliseconds of one fn() call over `repeats` graph replays."""
    return statistics.median(graph_replays_ms(cp, fn, calls, lambda n: n >= repeats, before))


def replay_ms(cp, graphs, stream, repeats: int = 10) -> float:
    """Median device milliseconds of launching captured `graphs` in order on `stream`, between two
    events (a trainer's own graphs, replayed as its epoch ran them)."""
    times = []
    for _ in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        for graph in graphs:
            graph.launch(stream)
        stop.record(stream)
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def time_ms(cp, fn, repeats: int = 20, warmup: int = 3) -> float:
    """Median milliseconds of fn() between CUDA events."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def median_seconds(fn, repeats: int = 10, warmup: int = 2, sync=lambda: None) -> float:
    return statistics.median(repeat_seconds(fn, repeats, warmup, sync))


def repeat_seconds(fn, repeats: int = 10, warmup: int = 2, sync=lambda: None) -> list[float]:
    """Host seconds of each of `repeats` calls of fn (each followed by sync), after `warmup` calls."""
    return side_by_side_seconds([fn], repeats, warmup, sync)[0]


def side_by_side_seconds(fns, repeats: int = 10, warmup: int = 2, sync=lambda: None) -> list[list[float]]:
    """Host seconds of each of `repeats` calls of every fn in fns (each followed by sync), their calls taken in
    turn (a, b, a, b, ...) after `warmup` calls of each: where what matters is the difference between them, a
    machine that slows or speeds up while they are timed moves them alike (timed one after the other, its drift
    is in the difference)."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    sync()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, seconds in zip(fns, times):
            start = time.perf_counter()
            fn()
            sync()
            seconds.append(time.perf_counter() - start)
    return times
