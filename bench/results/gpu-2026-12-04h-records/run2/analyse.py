"""Intervals of run 2's traces (trace.patch): the 1 MiB copies are the last 20 records (the 64 MiB copies' records
come before). python3 analyse.py"""
import re
import statistics as st

srv = open("trace-srv.txt").read().split("\n")
nums = lambda l: list(map(int, re.findall(r"\d+", l)))[1:]
A = [nums(l) for l in srv if l.startswith("arr")]  # began arrived opened recvs
S = [nums(l) for l in srv if l.startswith("srv")]  # sync began slotted queued done
C = [nums(l) for l in open("trace-cli.txt") if l.startswith("cli")]  # start first end take
a, s, c = A[-20:], S[-20:], C[-20:]
med = lambda xs: f"{st.median(xs) / 1e3:6.1f} us [{min(xs) / 1e3:.1f}-{max(xs) / 1e3:.1f}]"
print("client: first piece sealed after", med([x[1] - x[0] for x in c]), "; all sent after", med([x[2] - x[0] for x in c]),
      "; waiting for pieces in all", med([x[3] for x in c]))
print("worker: head seen after the client began", med([y[0] - x[0] for x, y in zip(c, a)]))
print("worker: head -> last byte", med([x[1] - x[0] for x in a]), "in", st.median([x[3] for x in a]), "receives")
print("client: all sent -> worker's last byte", med([y[1] - x[2] for x, y in zip(c, a)]))
print("worker: last byte -> opened", med([x[2] - x[1] for x in a]))
print("worker: opened -> copy queued (the trace's own file write between)", med([y[2] - x[2] for x, y in zip(a, s)]))
print("worker: queueing the 1 MiB copy and its event", med([x[3] - x[2] for x in s]))
print("worker: the device copy and the synchronize", med([x[4] - x[3] for x in s]))
