"""One removal protocol for the scheduler's releases and the reaper (docs/removal.md).

Methods propose candidates; `decide` holds the protocol's pure decisions (validation against each
group's minimum, the disruption budget and removals already in flight; re-check and terminate
verdicts); `execute` carries them out, machine by machine, under the placement lease.
"""
