"""Medians [ranges] of run 7's trace (trace_recv.patch) over the last 20 records of each kind: the 1 MiB copies
(the 64 MiB copies' records come before). python3 analyse.py"""
import re
import statistics as st

lines = open("trace-recv.txt").read().splitlines()
for kind in ("plain 1048576", "rec 1048576"):
    rows = [[float(x) for x in re.findall(r"[\d.]+", l.split(":", 1)[1])] for l in lines if l.startswith(kind)][-20:]
    med = lambda i: f"{st.median(r[i] for r in rows):.1f} [{min(r[i] for r in rows):.1f}-{max(r[i] for r in rows):.1f}]"
    if kind.startswith("plain"):  # arrive | recv us, calls, KiB each | poll us, polls
        print(f"plain 1 MiB: head -> last byte {med(0)} us; in recv calls that brought bytes {med(1)} us ({med(2)} calls);"
              f" polling {med(4)} us")
    else:  # arrive, open-tail | recv us, calls, KiB | poll us, polls | give | help, ran
        print(f"sealed 1 MiB: head -> last byte {med(0)} us; in recv calls that brought bytes {med(2)} us ({med(3)} calls);"
              f" polling {med(5)} us; handing pieces to the pipe {med(7)} us; helping it {med(8)} us"
              f" (pieces run: {med(9)}); last byte -> opened {med(1)} us")
