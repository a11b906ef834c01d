#!/usr/bin/env python3
"""Markdown tables of tpfabric against the best peer, from one or more compare.py JSON files.

Each cell: tpf time / best peer's time (that peer), ratio; bold where tpf is slower than
--bold-above (default 1.0). Peers whose results failed their check at that point are left out of
"best peer". Later files override earlier ones for the same (collective, N, impl, size), so a
precise small-size sweep and a long large-size sweep can be merged.

  bench/peers/tables.py docs/results/peers-n2-small.json docs/results/peers-n2-large.json
"""
import argparse
import json

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def human(nbytes):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return "%d%s" % (nbytes >> shift, unit)
    return str(nbytes)


def short(us):
    return "%.3g" % us


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--bold-above", type=float, default=1.0)
    args = p.parse_args()
    cells = {}  # (coll, n, impl, bytes) -> (median_us, wrong)
    for path in args.files:
        with open(path) as f:
            for r in json.load(f)["results"]:
                key = (r["collective"], r["nranks"], r["impl"], r["bytes"])
                cells[key] = (r["median_us"], r.get("wrong") or 0)
    worst = {}
    for n in sorted({k[1] for k in cells}):
        colls = [c for c in COLLECTIVES if any(k[0] == c and k[1] == n for k in cells)]
        sizes = sorted({k[3] for k in cells if k[1] == n})
        print("\n**N = %d**: tpf time in us / best peer's time (peer), ratio\n" % n)
        print("| size | " + " | ".join(colls) + " |")
        print("| ---: | " + " | ".join("---" for _ in colls) + " |")
        for b in sizes:
            row = []
            for c in colls:
                tpf = cells.get((c, n, "tpf", b))
                peers = [(t, impl) for (cc, nn, impl, bb), (t, wrong) in cells.items()
                         if cc == c and nn == n and bb == b and impl != "tpf" and not wrong]
                if tpf is None or not peers:
                    row.append("-")
                    continue
                best, who = min(peers)
                ratio = tpf[0] / best
                worst[(c, n)] = max(worst.get((c, n), 0), ratio)
                text = "%.2f" % ratio
                if ratio > args.bold_above:
                    text = "**%s**" % text
                row.append("%s / %s (%s) %s" % (short(tpf[0]), short(best), who, text))
            print("| %s | %s |" % (human(b), " | ".join(row)))
    print("\nWorst ratio per collective and N:")
    for (c, n), r in sorted(worst.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print("  N=%d %-15s %.3f" % (n, c, r))


if __name__ == "__main__":
    main()
