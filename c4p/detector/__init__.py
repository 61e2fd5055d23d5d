"""The collective as a sensor (C4D's half of C4): timing summaries in, findings and actions out.

Training repeats the same collectives every step, so a slow link, a slow rank or a hung peer
leaves a timing syndrome that can be judged against the job's own other connections and ranks in
the same step. The sensor is ``libc4p``'s reporting API (and the NCCL profiler plugin built on
it); the host agent folds its ranks' samples into the summaries of ``summary``; the controller
judges them here, knowing every QP's path, which is what lets it name a *link*.

May import ``topology`` and ``c4p.controller``'s typed state; never gRPC, never I/O: the
detector is a pure function of summaries and the plan in force, so it can be replayed.
"""
