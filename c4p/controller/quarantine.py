"""Isolating the jobs that cannot be planned: bisection over the jobs, and the quarantine that
keeps them out of planning until their intents change.

Why apart from :mod:`c4p.controller.reconcile`: a step that fails looks for the jobs that make
it fail by planning halves of them (quick probes, no search budget); that search and what it
remembers are their own concern, and the step hands it only a way to try a set of jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from c4p.controller.intents import JobInput, PlanInputs

log = logging.getLogger("c4p.controller")

MAX_PROBES = 64
"""Quick plans spent looking for the jobs that make a step fail (bisection over the jobs)."""

Attempt = Callable[[PlanInputs], object]
"""Plans the given inputs with no search budget; raises where they cannot be planned."""


def without(inputs: PlanInputs, jobs: Iterable[str]) -> PlanInputs:
    """The plan inputs without ``jobs`` (their bindings in force stay, untouched)."""
    gone = set(jobs)
    return replace(inputs, jobs=tuple(j for j in inputs.jobs if j.job_id not in gone))


class Quarantine:
    """The jobs whose intents are known not to plan, at the revision that failed."""

    def __init__(self) -> None:
        self.why: dict[tuple[str, int, int], str] = {}
        """(job, incarnation, revision) -> why its intents cannot be planned (until they change)."""

    def apply(self, inputs: PlanInputs) -> PlanInputs:
        """``inputs`` without the jobs whose current intents are known not to plan."""
        current = {(j.job_id, j.incarnation, j.revision) for j in inputs.jobs}
        self.why = {k: v for k, v in self.why.items() if k in current}
        skip = {k[0] for k in self.why}
        return without(inputs, skip) if skip else inputs

    def culprits(self, inputs: PlanInputs, error: Exception, attempt: Attempt) -> dict[str, str]:
        """The jobs whose intents make planning fail, found by bisection (empty: none can be
        singled out); each is quarantined at its current revision with the reason."""
        candidates = [j for j in inputs.jobs if j.spec is not None]
        probes = 0

        def plans(jobs: list[JobInput]) -> bool:
            nonlocal probes
            probes += 1
            try:
                attempt(replace(inputs, jobs=tuple(jobs)))
            except Exception:
                return False
            return True

        def search(jobs: list[JobInput]) -> list[JobInput]:
            if len(jobs) == 1:
                return jobs
            half = len(jobs) // 2
            found: list[JobInput] = []
            for part in (jobs[:half], jobs[half:]):
                if probes < MAX_PROBES and not plans(part):
                    found += search(part)
            return found

        if len(candidates) < 1:
            return {}
        bad = search(candidates) if len(candidates) > 1 else candidates
        if not bad or (len(bad) == len(candidates) and len(candidates) > 1):
            return {}  # the jobs fail together, or the failure is not theirs
        if len(candidates) == 1 and not _fails_alone(inputs, attempt):
            return {}
        why = f"its intents cannot be planned ({type(error).__name__}: {error})"[:500]
        for job in bad:
            self.why[(job.job_id, job.incarnation, job.revision)] = why
            log.warning(
                "job cannot be planned",
                extra={"event": "job-unplannable", "job": job.job_id, "error": why},
            )
        return {job.job_id: why for job in bad}


def _fails_alone(inputs: PlanInputs, attempt: Attempt) -> bool:
    """With one job: is it the job (planning with no jobs works) or the fabric?"""
    try:
        attempt(replace(inputs, jobs=()))
    except Exception:
        return False
    return True
