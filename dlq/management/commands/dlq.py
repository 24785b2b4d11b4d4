"""``manage.py dlq ...``: the DLQ console for runbooks and scripts. Every subcommand calls the same service
as the API and prints JSON; mutations need ``--as <username>`` and are checked and audited as that user.

    manage.py dlq list --status parked --pipeline github-demo --limit 20
    manage.py dlq show 42
    manage.py dlq fix 42 --as alice --reason "add the missing size" --value '{"size": 3}'
    manage.py dlq replay 42 --as alice
    manage.py dlq skip 43 --as alice --reason "test event"
    manage.py dlq request-delete 44 --as alice --reason "contains a password"
    manage.py dlq approve 7 --as bob
    manage.py dlq bulk replay --as alice --reason "broker was down" --filter error_type=RetryExhausted --dry-run
    manage.py dlq bulk-status 3
    manage.py dlq groups
    manage.py dlq verify-audit          # exit 0 ok, 1 broken at #N, 2 unverified (an anchor unreadable or behind)
    manage.py dlq recount --as admin [--fix]   # kept counts vs the rows; exit 1 when they differ (unfixed)
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError, CommandParser

from access.audit import verify_chain
from dlq import services
from dlq.api.serializers import (
    ApprovalSerializer,
    BulkSerializer,
    DeadLetterListSerializer,
    FailureGroupSerializer,
)
from dlq.filters import FilterError, MessageFilter
from dlq.models import ApprovalRequest, BulkAction, DeadLetter, FailureGroup, Status
from dlq.selectors import with_parked_counts


def _user(name: str | None) -> User:
    if not name:
        raise CommandError("this changes data: say who you are with --as <username>")
    user = User.objects.filter(username=name, is_active=True).first()
    if user is None:
        raise CommandError(f"no active user {name!r}")
    return user


def _filters(pairs: list[str]) -> MessageFilter:
    data: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise CommandError(f"--filter {pair!r}: use name=value, e.g. error_type=JsonPathNotFound")
        data[name] = value
    try:
        return MessageFilter.from_mapping(data)
    except FilterError as exc:
        raise CommandError(f"--filter {exc}") from None


class Command(BaseCommand):
    help = "The DLQ console from the command line (list, show, fix, replay, skip, delete, approve, bulk...)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="command", required=True)

        def with_actor(p: CommandParser) -> CommandParser:
            p.add_argument("--as", dest="actor", help="username acting (mutations are audited as them)")
            return p

        p = sub.add_parser("list", help="dead letters, newest first")
        p.add_argument("--filter", action="append", default=[], help="name=value (pipeline, error_type, ...)")
        p.add_argument("--status", default="", choices=["", *Status.values])
        p.add_argument("--pipeline", default="")
        p.add_argument("--limit", type=int, default=50)
        with_actor(p)
        p = with_actor(sub.add_parser("show", help="one dead letter in full"))
        p.add_argument("id", type=int)
        p = with_actor(sub.add_parser("fix", help="store a fixed payload"))
        p.add_argument("id", type=int)
        p.add_argument("--value", required=True, help="the new payload (JSON or text)")
        p.add_argument("--reason", required=True)
        p = with_actor(sub.add_parser("replay", help="replay to the source topic (or --topic)"))
        p.add_argument("id", type=int)
        p.add_argument("--topic", default="")
        p.add_argument("--force", action="store_true")
        p.add_argument("--reason", default="")
        p.add_argument("--idempotency-key", default="")
        p = with_actor(sub.add_parser("skip", help="close without producing"))
        p.add_argument("id", type=int)
        p.add_argument("--reason", required=True)
        p = with_actor(sub.add_parser("request-delete", help="ask an approver to erase the payload"))
        p.add_argument("id", type=int)
        p.add_argument("--reason", required=True)
        for name in ("approve", "reject"):
            p = with_actor(sub.add_parser(name, help=f"{name} an approval request"))
            p.add_argument("id", type=int)
            p.add_argument("--reason", default="")
        p = with_actor(sub.add_parser("bulk", help="bulk replay or skip (with --dry-run to count)"))
        p.add_argument("kind", choices=["replay", "skip"])
        p.add_argument("--filter", action="append", default=[])
        p.add_argument("--reason", default="")
        p.add_argument("--rate", type=int, default=100, help="messages per second (0: unlimited)")
        p.add_argument("--topic", default="")
        p.add_argument("--dry-run", action="store_true")
        p = sub.add_parser("bulk-status", help="a bulk action's progress")
        p.add_argument("id", type=int)
        for name in ("bulk-pause", "bulk-resume", "bulk-cancel"):
            p = with_actor(sub.add_parser(name))
            p.add_argument("id", type=int)
            p.add_argument("--reason", default="")
        p = sub.add_parser("groups", help="failure groups, most recent first")
        p.add_argument("--limit", type=int, default=50)
        p = with_actor(
            sub.add_parser(
                "recount", help="check the kept dead-letter counts against the rows; --fix rebuilds"
            )
        )
        p.add_argument("--fix", action="store_true")
        sub.add_parser(
            "verify-audit",
            help="verify the audit log's hash chain against its anchors; exit 1 when broken, 2 when unverified",
        )

    def _print(self, data: Any) -> None:
        self.stdout.write(json.dumps(data, indent=2, default=str, ensure_ascii=False))

    def handle(self, *args: Any, **options: Any) -> None:
        command = options["command"]
        try:
            self._dispatch(command, options)
        except services.InvalidRequest as exc:
            raise CommandError(f"{exc.field}: {exc.message}") from None
        except (services.Conflict, services.ReplayFailed, PermissionDenied) as exc:
            raise CommandError(str(exc)) from None

    def _dead_letter(self, pk: int) -> DeadLetter:
        row = DeadLetter.objects.select_related("team", "pipeline__current_revision").filter(pk=pk).first()
        if row is None:
            raise CommandError(f"no dead letter {pk}")
        return row

    def _dispatch(self, command: str, o: dict[str, Any]) -> None:  # one branch per subcommand
        if command == "list":
            selection = _filters(o["filter"] + [f"status={o['status']}"] * bool(o["status"]))
            if o["pipeline"]:
                selection = _filters([*o["filter"], f"pipeline={o['pipeline']}"])
            viewer = _user(o["actor"]) if o["actor"] else None
            hidden = services.key_masked_teams(viewer) if viewer is not None else set()
            qs = selection.apply(
                services.visible_dead_letters(viewer) if viewer is not None else DeadLetter.objects.all(),
                key_masked_teams=hidden,
            )
            self._print(
                DeadLetterListSerializer(
                    qs.defer("key", "value", "headers")[: o["limit"]],
                    many=True,
                    context={"key_masked_teams": hidden},
                ).data
            )
        elif command == "show":
            row = self._dead_letter(o["id"])
            actor = _user(o["actor"]) if o["actor"] else None
            if actor is None:
                raise CommandError(
                    "say who is looking with --as <username> (payload masking depends on the role)"
                )
            self._print(asdict(services.inspect_message(user=actor, dead_letter=row)))
        elif command == "fix":
            rev = services.fix_payload(
                actor=_user(o["actor"]),
                dead_letter=self._dead_letter(o["id"]),
                value=o["value"].encode(),
                reason=o["reason"],
            )
            self._print({"payload_revision": rev.number, "diff": rev.diff, "check": rev.dsl_check})
        elif command == "replay":
            attempt = services.replay(
                actor=_user(o["actor"]),
                dead_letter=self._dead_letter(o["id"]),
                target_topic=o["topic"],
                force=o["force"],
                reason=o["reason"],
                idempotency_key=o["idempotency_key"],
            )
            self._print(
                {
                    "replay_id": str(attempt.replay_id),
                    "state": attempt.state,
                    "topic": attempt.target_topic,
                    "partition": attempt.produced_partition,
                    "offset": attempt.produced_offset,
                }
            )
        elif command == "skip":
            row = services.skip(
                actor=_user(o["actor"]), dead_letter=self._dead_letter(o["id"]), reason=o["reason"]
            )
            self._print({"id": row.pk, "status": row.status})
        elif command == "request-delete":
            approval = services.request_delete(
                actor=_user(o["actor"]), dead_letter=self._dead_letter(o["id"]), reason=o["reason"]
            )
            self._print(ApprovalSerializer(approval).data)
        elif command in ("approve", "reject"):
            found = ApprovalRequest.objects.filter(pk=o["id"]).first()
            if found is None:
                raise CommandError(f"no approval request {o['id']}")
            approval = found
            decide = services.approve if command == "approve" else services.reject
            self._print(
                ApprovalSerializer(
                    decide(actor=_user(o["actor"]), approval=approval, reason=o["reason"])
                ).data
            )
        elif command == "bulk":
            actor = _user(o["actor"])
            selection = _filters(o["filter"])
            if o["dry_run"]:
                self._print(asdict(services.preview_bulk(actor=actor, selection=selection)))
                return
            bulk = services.create_bulk(
                actor=actor,
                kind=o["kind"],
                selection=selection,
                reason=o["reason"],
                rate_limit=o["rate"],
                target_topic=o["topic"],
            )
            self._print(BulkSerializer(bulk).data)
        elif command == "bulk-status":
            self._print(BulkSerializer(self._bulk(o["id"])).data)
        elif command in ("bulk-pause", "bulk-resume", "bulk-cancel"):
            operation = {
                "bulk-pause": services.pause_bulk,
                "bulk-resume": services.resume_bulk,
                "bulk-cancel": services.cancel_bulk,
            }[command]
            self._print(
                BulkSerializer(
                    operation(actor=_user(o["actor"]), bulk=self._bulk(o["id"]), reason=o["reason"])
                ).data
            )
        elif command == "groups":
            groups = with_parked_counts(FailureGroup.objects.all()).order_by("-last_seen")[: o["limit"]]
            self._print(FailureGroupSerializer(groups, many=True, context={"trends": {}}).data)
        elif command == "recount":
            checked = services.recount(actor=_user(o["actor"]), fix=o["fix"])
            self._print(asdict(checked))
            if checked.differences and not checked.rebuilt:
                self.stderr.write(
                    f"{len(checked.differences)} kept count(s) differ from the rows; --fix rebuilds"
                )
                sys.exit(1)
        elif command == "verify-audit":
            report = verify_chain()
            self._print(asdict(report))
            if report.status == "broken":
                self.stderr.write(f"audit chain broken at #{report.broken_at}: {report.problem}")
                sys.exit(1)
            if report.status == "unverified":
                self.stderr.write(f"audit chain unverified: {report.problem}")
                sys.exit(2)

    def _bulk(self, pk: int) -> BulkAction:
        bulk = BulkAction.objects.select_related("created_by", "team").filter(pk=pk).first()
        if bulk is None:
            raise CommandError(f"no bulk action {pk}")
        return bulk
