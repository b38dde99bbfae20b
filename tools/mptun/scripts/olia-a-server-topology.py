#!/usr/bin/env python3
"""Scenario files for OLIA's scenario A with the type-1 users' server link as their bottleneck.

docs/scenarios/olia-a*.toml give the type-1 users a private link of N1 x 1 Mbit/s and the access
point (AP) as two separate bottlenecks. In these files both type-1 paths end on one server link of
N1 x 1 Mbit/s: the private path crosses only that link, the AP path crosses the AP and then that
link. The type-2 users cross the AP to a second server. docs/cc.md ("OLIA-A") says why and
compares the two.

    olia-a-server-topology.py DIR [--qdisc droptail|red] [--red-min F] [--red-max F]

This writes DIR/olia-a{,-30}{,-tcp}-server[-red].toml. The bottleneck queues hold 1 BDP of the
150 ms round trip. With --qdisc red, RED runs inside that limit: min and max are fractions of the
BDP (default 0.1 and 0.3, Floyd's max = 3 x min), with max_p 0.1. Run them with
`mptun sim run FILE --cc lia|olia --seed S --json`.
"""
import argparse
import os


def gen(out, n1, n2, type1, qdisc, red_min, red_max):
    suffix = "-red" if qdisc == "red" else ""
    name = f"olia-a{'-30' if n1 == 30 else ''}{'-tcp' if type1 == 'tcp' else ''}-server{suffix}"
    parts = [f'name = "{name}"\nduration = "120s"\nseed = 1\nmeasure_from = "60s"\n']

    def link(lname, rate_mbit, bottleneck):
        s = f'[[link]]\nname = "{lname}"\nrate = "{rate_mbit}mbit"\ndelay = "37500us"\n'
        if bottleneck:
            bdp = round(rate_mbit * 1e6 / 8 * 0.150 / 1500)
            s += f'queue = {bdp}\njitter = "500us"\n'
            if qdisc == "red":
                lo = max(2, round(bdp * red_min))
                s += f'qdisc = "red"\nmin = {lo}\nmax = {max(lo + 1, round(bdp * red_max))}\n'
        parts.append(s)

    link("private", 1000, False)
    link("server", n1, True)
    link("ap", n2, True)
    link("server2", 1000, False)
    q = lambda ls: "[" + ", ".join(f'"{x}"' for x in ls) + "]"
    for i in range(1, n1 + 1):
        parts.append(f'[[route]]\na = "10.1.{i}.1"\nb = "10.0.1.2"\nlinks = {q(["private", "server"])}\n')
        parts.append(f'[[route]]\na = "10.2.{i}.1"\nb = "10.0.1.2"\nlinks = {q(["ap", "server"])}\n')
    for i in range(1, n2 + 1):
        parts.append(f'[[route]]\na = "10.3.{i}.1"\nb = "10.0.2.2"\nlinks = {q(["ap", "server2"])}\n')
    for i in range(1, n1 + 1):
        if type1 == "mptcp":
            parts.append(f'[[flow]]  # type-1 user {i}\nkind = "mptcp"\nfrom = ["10.1.{i}.1", "10.2.{i}.1"]\n'
                         f'to = "10.0.1.2"\ncc = "lia"\nscheduler = "minrtt"\n')
        else:
            parts.append(f'[[flow]]  # type-1 user {i}\nkind = "tcp"\nfrom = ["10.1.{i}.1"]\nto = "10.0.1.2"\ncc = "reno"\n')
    for i in range(1, n2 + 1):
        parts.append(f'[[flow]]  # type-2 user {i}\nkind = "tcp"\nfrom = ["10.3.{i}.1"]\nto = "10.0.2.2"\ncc = "reno"\n')
    with open(os.path.join(out, f"{name}.toml"), "w") as f:
        f.write("\n".join(parts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--qdisc", choices=["droptail", "red"], default="droptail")
    ap.add_argument("--red-min", type=float, default=0.1)
    ap.add_argument("--red-max", type=float, default=0.3)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    for n1 in (10, 30):
        for t in ("mptcp", "tcp"):
            gen(a.dir, n1, 10, t, a.qdisc, a.red_min, a.red_max)


if __name__ == "__main__":
    main()
