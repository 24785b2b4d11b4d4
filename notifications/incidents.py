"""Which events open an incident and which later event closes it, for channels that keep incidents open
until told otherwise (PagerDuty). Django-free apart from the ``EventType`` names.

The pairs are the ones the other apps' signals really emit (``notifications.events``):

| opens | closed by | incident key |
|---|---|---|
| ``alert.firing`` (``alert:<id>:firing``) | ``alert.resolved`` of the same alert (``alert:<id>:resolved``) | ``alert:<id>`` |

An alert (one rule of one pipeline: DLQBacklog, ConsumerLagIncreasing, HighCommitFailureRate) is one
``pipelines.models.Alert`` row from the evaluation it starts firing in to the one it stops in, so its id
names the incident, and the resolution carries the same id. Every other event type opens an incident
that nothing here closes, keyed by its own event key: no signal says a halted or failed pipeline runs
again (a restart sends ``revision_live`` only when the revision changed), or that an approval was decided,
so those incidents are resolved in PagerDuty by the person who handled them.
"""

from __future__ import annotations

from notifications.models import EventType

#: The event type that closes what the key's type opened.
CLOSED_BY: dict[str, str] = {EventType.ALERT_FIRING: EventType.ALERT_RESOLVED}
#: Every type of a pair (never folded into a digest for an incident channel: a folded resolution would
#: leave its incident open for good).
PAIRED: frozenset[str] = frozenset(CLOSED_BY) | frozenset(CLOSED_BY.values())
_STATE_SUFFIX: dict[str, str] = {EventType.ALERT_FIRING: ":firing", EventType.ALERT_RESOLVED: ":resolved"}


def incident_key(event_type: str, event_key: str) -> str:
    """The key naming the incident an event opens or closes: the same for both events of a pair
    (``alert:42`` for ``alert:42:firing`` and ``alert:42:resolved``), the event key itself otherwise (a
    digest's ``digest:<type>:<opened at>`` included)."""
    suffix = _STATE_SUFFIX.get(event_type)
    if suffix is not None and event_key.endswith(suffix):
        return event_key.removesuffix(suffix)
    return event_key


def closes(event_type: str, *, is_digest: bool = False) -> bool:
    """Whether an event of ``event_type`` closes its incident (a digest never does: it names no single
    incident)."""
    return not is_digest and event_type in CLOSED_BY.values()
