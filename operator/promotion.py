"""Which generation serves: the operator's promotion decision, a pure function of what it saw.

`decide_promotion(status, observed)` takes the RagIndex status (`activeGeneration` and
`status.generations[]`) and what the operator observed this round (the target generation's
RayService readiness and the build report its app serves, `ragindex.generations.BuildReport`)
and returns the `Action`: the generations' new entries, which generation serves, and which
generations' objects may be pruned. The handler only applies it.

- The first generation of an index serves as soon as its RayService is ready (there is nothing
  older to keep serving, and nothing to backfill from).
- A later generation is promoted only when its backfill reached the end of `docs` and every
  check (CHECKS) passed; a RayService that is merely ready promotes nothing. Until then the
  serving generation keeps serving (Ready stays True) and the target shows `Backfilling n%`
  or `Verifying`.
- A failed check marks the target `Failed` with the check named; the old generation keeps
  serving and Degraded says why. Failed is final for that generation: changing a generation
  field (or reverting the spec) is the retry.
- On promotion the old generation is `Retained` for `rollbackWindowHours`; its RayService keeps
  running (and consuming `docs`), so reverting the spec within the window (`kubectl apply` of
  the old spec) promotes it back, through the same checks, without a rebuild. Past the window,
  or once the spec names another generation, retained, failed and abandoned generations are
  retired: their objects are pruned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ragindex.generations import CHECKS, BuildReport
from ragindex.operator.status import Verdict

BACKFILLING = "Backfilling"
VERIFYING = "Verifying"
SERVING = "Serving"
RETAINED = "Retained"
FAILED = "Failed"
PHASES = (BACKFILLING, VERIFYING, SERVING, RETAINED, FAILED)
WAITING_SHOWN = 3  # view replicas named in a Verifying reason; the report has them all

ActionKind = Literal["wait", "promote", "refuse", "hold"]


@dataclass(frozen=True)
class Observed:
    """What the operator saw this round; `now` is an RFC 3339 time, `moment` the same instant."""

    target: str  # the generation the spec names
    target_ready: Verdict  # its RayService
    report: BuildReport | None  # the build report its app serves; None: not reachable
    now: str
    moment: datetime
    window_s: float  # spec.generations.rollbackWindowHours, in seconds


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    active: str | None  # the generation serving after the action
    generations: list[dict[str, Any]]  # status.generations after the action
    ready: Verdict  # the Ready condition
    retire: list[str] = field(default_factory=list)  # generations whose objects are pruned


def _parse(rfc3339: str) -> datetime:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))


def _entry(
    entry: Mapping[str, Any] | None, generation: str, phase: str, now: str, **fields: Any
) -> dict[str, Any]:
    """`entry` in `phase`; `since` moves only when the phase changes."""
    old = dict(entry or {"id": generation, "createdAt": now, "progress": "0%"})
    since = old.get("since") if old.get("phase") == phase else now
    out = {**old, "phase": phase, "since": since or now, "reason": "", **fields}
    if "checks" not in fields and phase not in (SERVING, RETAINED):
        out.pop("checks", None)  # the checks of an earlier build say nothing about this one
    return out


def _progress_reason(report: BuildReport) -> str:
    """Where a build stands, and while it verifies, the first view replicas it waits on."""
    reason = f"{report.consumed} of {report.end} docs records consumed"
    if report.waiting_on:
        shown = list(report.waiting_on[:WAITING_SHOWN])
        if len(report.waiting_on) > WAITING_SHOWN:
            shown.append(f"{len(report.waiting_on) - WAITING_SHOWN} more")
        reason += f", waiting on {'; '.join(shown)}"
    return reason


def _checks(report: BuildReport) -> list[dict[str, Any]]:
    found = report.checks or {}
    return [{"name": c, "passed": not found.get(c), "message": found.get(c, "")} for c in CHECKS]


def decide_promotion(status: Mapping[str, Any] | None, observed: Observed) -> Action:
    """The action for this round; see the module docstring for the rules."""
    prev = dict(status or {})
    active: str | None = prev.get("activeGeneration")
    target = observed.target
    now = observed.now
    entries: dict[str, dict[str, Any]] = {
        e["id"]: dict(e) for e in prev.get("generations") or [] if e.get("id")
    }
    if active and active not in entries:  # status written before generations were reported
        entries[active] = _entry(None, active, SERVING, now, progress="100%")

    def done(kind: ActionKind, new_active: str | None, ready: Verdict) -> Action:
        return _finish(kind, new_active, target, entries, ready, observed)

    if active is None or active == target:
        # The first generation (nothing older serves), or the serving one: it serves when ready.
        ready = observed.target_ready
        if ready.ok:
            entries[target] = _entry(entries.get(target), target, SERVING, now, progress="100%")
            return done("promote" if active is None else "hold", target, ready)
        entries[target] = _entry(
            entries.get(target), target, entries.get(target, {}).get("phase", BACKFILLING), now
        )
        return done("wait", active, ready)

    entry = entries.get(target)
    serving = f"generation {active} serves while {target} is built"
    if entry is not None and entry.get("phase") == FAILED:
        return done("refuse", active, Verdict(True, "PreviousGenerationServing", serving))
    report = observed.report
    if not observed.target_ready.ok:
        why = observed.target_ready.message
        entries[target] = _entry(entry, target, BACKFILLING, now, reason=why)
    elif report is None or report.generation != target:
        why = "no build report from the new generation's app yet"
        entries[target] = _entry(entry, target, BACKFILLING, now, reason=why)
    elif report.checks is None:
        phase = VERIFYING if report.consumed >= report.end else BACKFILLING
        entries[target] = _entry(
            entry,
            target,
            phase,
            now,
            progress=f"{report.progress}%",
            reason=_progress_reason(report),
        )
    elif report.failed:
        failed = report.failed
        why = "; ".join(f"{c}: {(report.checks or {})[c]}" for c in failed)
        entries[target] = _entry(
            entry,
            target,
            FAILED,
            now,
            progress=f"{report.progress}%",
            checks=_checks(report),
            reason=f"not promoted, failed check(s) {', '.join(failed)}: {why}",
        )
        return done("refuse", active, Verdict(True, "PreviousGenerationServing", serving))
    else:
        entries[target] = _entry(
            entry, target, SERVING, now, progress="100%", checks=_checks(report)
        )
        entries[active] = _entry(entries[active], active, RETAINED, now)
        return done("promote", target, Verdict(True, "Serving", f"generation {target} serves"))
    return done(
        "wait",
        active,
        Verdict(True, "PreviousGenerationServing", f"{serving}: {entries[target]['reason']}"),
    )


def _finish(
    kind: ActionKind,
    active: str | None,
    target: str,
    entries: dict[str, dict[str, Any]],
    ready: Verdict,
    observed: Observed,
) -> Action:
    """Retire what no longer earns its keep: retained generations past the window, and failed
    or unfinished ones the spec no longer names."""
    retire = []
    for generation, entry in entries.items():
        if generation in (active, target):
            continue
        phase = entry.get("phase")
        age = (observed.moment - _parse(entry.get("since") or observed.now)).total_seconds()
        if phase != RETAINED or age > observed.window_s:
            retire.append(generation)
    kept = [e for g, e in entries.items() if g not in retire]
    kept.sort(key=lambda e: (e.get("createdAt") or "", e["id"]))
    return Action(kind, active, kept, ready, sorted(retire))
