"""``manage.py kafka_cluster``: list, add, change, test and remove named Kafka clusters from a shell (what the
clusters page and ``/api/clusters/`` do), as a named admin, audited like them."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError, CommandParser

from pipelines import clusters
from pipelines.models import DEFAULT_CLUSTER_NAME, KafkaCluster
from streamforge_web.management.commands.kafka_check import write_report

_SETTINGS = {
    "--description": "description",
    "--bootstrap-servers": "bootstrap_servers",
    "--security-protocol": "security_protocol",
    "--sasl-mechanism": "sasl_mechanism",
    "--sasl-username": "sasl_username",
    "--password-ref": "password_ref",
    "--ssl-ca-location": "ssl_ca_location",
    "--ssl-certificate-location": "ssl_certificate_location",
    "--ssl-key-location": "ssl_key_location",
}


class Command(BaseCommand):
    help = (
        "Manage named Kafka clusters: list, add NAME, set NAME, test NAME, remove NAME. Changes need --as, an "
        "admin's user name, and are audited. Passwords are references bound to the cluster: --password-ref "
        "env:STREAMFORGE_CLUSTER_<NAME>_PASSWORD or file:<STREAMFORGE_KAFKA_CREDENTIAL_DIRS>/<name>/<file>. "
        "Nothing connects to a new or changed cluster until `test NAME --as ADMIN` passes."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("verb", choices=["list", "add", "set", "test", "remove"])
        parser.add_argument("name", nargs="?", default="", help="the cluster (test: 'default' too)")
        parser.add_argument("--as", dest="actor", default="", help="the admin making the change")
        for flag, name in _SETTINGS.items():
            parser.add_argument(flag, dest=name, default=None)
        parser.add_argument(
            "--verify-hostname", dest="verify_hostname", choices=["true", "false"], default=None
        )
        parser.add_argument(
            "--timeout", type=float, default=10.0, help="test: seconds to wait for the cluster"
        )

    def _actor(self, username: str) -> User:
        user = User.objects.filter(username=username).first() if username else None
        if user is None:
            raise CommandError("name the admin making the change with --as USERNAME")
        return user

    def _row(self, name: str) -> KafkaCluster:
        row = KafkaCluster.objects.filter(name=name).first()
        if row is None:
            raise CommandError(
                f"no Kafka cluster named {name!r} (the default one is set by KAFKA_* variables)"
            )
        return row

    def handle(self, *args: Any, **options: Any) -> None:
        verb, name = options["verb"], options["name"]
        if verb == "list":
            for cluster in clusters.clusters():
                shown = clusters.describe(cluster)
                user = f" as {shown['sasl_username']}" if shown["sasl_username"] else ""
                self.stdout.write(
                    f"{shown['name']}: {shown['bootstrap_servers']} {shown['security_protocol']}{user}, "
                    f"{shown['pipelines']} pipeline(s)"
                )
            return
        if not name:
            raise CommandError(f"{verb} needs the cluster's name")
        values: dict[str, Any] = {
            k: v for k, v in options.items() if k in _SETTINGS.values() and v is not None
        }
        if options["verify_hostname"] is not None:
            values["verify_hostname"] = options["verify_hostname"] == "true"
        try:
            if verb == "test":
                actor = self._actor(options["actor"])
                row = None if name == DEFAULT_CLUSTER_NAME else self._row(name)
                checked = clusters.check_cluster(actor=actor, cluster=row, timeout=options["timeout"])
                write_report(self.stdout, checked.report)
                if row is not None:
                    state = "verified" if checked.verified else "NOT verified (nothing connects to it)"
                    self.stdout.write(f"cluster {row.name}: {state}")
            elif verb == "add":
                row = clusters.save_cluster(
                    actor=self._actor(options["actor"]), values={"name": name, **values}
                )
                self.stdout.write(f"added cluster {row.name}")
            elif verb == "set":
                row = clusters.save_cluster(
                    actor=self._actor(options["actor"]), values=values, cluster=self._row(name)
                )
                self.stdout.write(f"changed cluster {row.name}")
            else:
                clusters.delete_cluster(actor=self._actor(options["actor"]), cluster=self._row(name))
                self.stdout.write(f"removed cluster {name}")
        except clusters.ClusterError as exc:
            raise CommandError(
                "\n".join(f"{f}: {' '.join(m)}" for f, m in sorted(exc.errors.items()))
            ) from None
        except (clusters.ClusterInUse, PermissionDenied) as exc:
            raise CommandError(str(exc)) from None
