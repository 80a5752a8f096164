"""The two-way wgmma GEMM's stage protocol (gemm_wgmma.cu, KW = 2), played out on the CPU under random schedules:
one producer filling a ring of stages in order (each fill landing after a random delay, out of order), two consumer
ways waiting on every stage in order with mbarrier parity tests and computing every other one, and at each tile's
end the halves swapped through the area a 16-bit C is then staged through. Each run reports what went wrong:

  wrong phase   a way's parity test passed while its stage held another position's fill (or none)
  overwritten   the producer filled a stage again while a way still read it
  area race     one way wrote the shared area while the other still read or staged in it
  deadlock      no actor could move and work was left

  python two_ways_protocol.py [RUNS]    main's protocol (release by the consuming way; two barriers a tile) and
                                        both_ways_release.patch's (every way arrives on every stage it waits on;
                                        a third barrier before the halves; landed in session 55, 04c5d92),
                                        one tile a CTA and several

A model, not the kernel: one actor stands for a way's four warps, and a step is any one actor's move."""
import random
import sys
from collections import Counter

STAGES = 8


def run(rng, ktiles, both_arrive, lead_barrier):
    """One schedule; returns the set of what went wrong."""
    where = [(i, t) for i, k in enumerate(ktiles) for t in range(k)]  # a position's (tile, k-step)
    full = [0] * STAGES    # completed fills a stage
    empty = [0] * STAGES   # completed releases a stage
    arrived = [0] * STAGES
    need = 2 if both_arrive else 1
    landing = []           # fills issued, not landed: (position)
    holder = [None] * STAGES   # the position whose data a stage holds
    reading = [set() for _ in range(STAGES)]  # ways reading a stage
    produced = 0
    errors = set()
    # a way: position it is at, its own stage whose release waits on its next MMAs, phase in the tile's end
    ways = [{"p": 0, "pending": None, "end": None, "tile": 0} for _ in range(2)]
    barrier = Counter()    # (tile, name) -> ways arrived
    area = [None, None]    # what each way is doing in the shared area: "write", "read", "stage" or None

    def release(s):
        arrived[s] += 1
        if arrived[s] == need:
            arrived[s] = 0
            empty[s] += 1

    def producer_moves():
        nonlocal produced
        if produced >= len(where):
            return False
        s, lap = produced % STAGES, produced // STAGES
        if lap and empty[s] % 2 != lap % 2:   # the producer's parity wait on empty (a fresh barrier passes)
            return False
        if reading[s]:
            errors.add("overwritten")
        landing.append(produced)
        produced += 1
        return True

    def land():
        if not landing:
            return False
        p = landing.pop(rng.randrange(len(landing)))
        holder[p % STAGES] = p
        full[p % STAGES] += 1
        return True

    def sync(w, name):
        """A named barrier of both ways: True once both have arrived (each arrives once)."""
        key = (ways[w]["tile"], name)
        if ways[w].get("at") != key:
            ways[w]["at"] = key
            barrier[key] += 1
        return barrier[key] == 2

    def way_moves(w):
        me = ways[w]
        if me["tile"] >= len(ktiles):   # all its tiles stored
            return False
        if me["end"] is not None:
            return epilogue(w)
        p = me["p"]
        if p >= len(where) or where[p][0] != me["tile"]:   # the tile's k-steps done
            if me["pending"] is not None:
                release(me["pending"])
                reading[me["pending"]].discard(w)
                me["pending"] = None
            me["end"] = 0
            return True
        s, lap = p % STAGES, p // STAGES
        if full[s] % 2 == lap % 2:   # the parity test: phase `lap` not complete yet
            return False
        if holder[s] != p:
            errors.add("wrong phase")
        t = where[p][1]
        if t % 2 == w:   # its own stage: read it; the stage before is released once these MMAs are issued
            reading[s].add(w)
            if me["pending"] is not None:
                release(me["pending"])
                reading[me["pending"]].discard(w)
            me["pending"] = s
        elif both_arrive:
            release(s)
        me["p"] = p + 1
        return True

    def epilogue(w):
        me, other = ways[w], ways[1 - w]
        steps = (["lead"] if lead_barrier else []) + ["write", "given", "read", "taken", "stage", "done"]
        step = steps[me["end"]]
        if step in ("lead", "given", "taken"):
            area[w] = None   # what it did in the area before the barrier is done once it arrives
            if not sync(w, step):
                return False
        elif step == "write":
            if area[1 - w] in ("read", "stage"):
                errors.add("area race")
            area[w] = "write"
        elif step == "read":
            area[w] = "read"
        elif step == "stage":
            if area[1 - w] in ("read", "write"):
                errors.add("area race")
            area[w] = "stage"
        else:   # the tile stored: on to the next
            area[w] = None
            me["end"], me["tile"] = None, me["tile"] + 1
            return True
        me["end"] += 1
        return True

    slow = rng.randrange(3)   # one actor (a way, or none) runs seldom in this schedule
    while True:
        actors = [producer_moves, land, lambda: way_moves(0), lambda: way_moves(1)]
        order = list(range(4))
        rng.shuffle(order)
        if slow < 2 and rng.random() < 0.9:
            order.remove(2 + slow)
        if any(actors[i]() for i in order):
            continue
        if slow < 2 and way_moves(slow):
            continue
        if all(me["tile"] >= len(ktiles) for me in ways):
            return errors
        errors.add("deadlock")
        return errors


def main(runs):
    rng = random.Random(0)
    for name, both, lead in (("main (release by the consuming way)", False, False),
                             ("both_ways_release.patch", True, True)):
        for tiles in (1, 4):
            seen = Counter()
            for _ in range(runs):
                ktiles = [rng.randint(1, 12) for _ in range(tiles)]
                for e in run(rng, ktiles, both, lead):
                    seen[e] += 1
            print(f"{name}, {tiles} tile(s) a CTA, {runs} schedules: "
                  + (", ".join(f"{e} in {n}" for e, n in sorted(seen.items())) or "nothing went wrong"))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)
