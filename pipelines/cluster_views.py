"""The Kafka clusters pages (admin): ``/clusters/`` lists every cluster with a "Test connection" button,
``/clusters/new/`` and ``/clusters/<name>/edit/`` add and change one, ``/clusters/<name>/delete/`` removes an
unused one after its name is typed again. Thin over ``pipelines.clusters``, which checks, audits and never
holds a password (only where it is, bound to the cluster: ``env:STREAMFORGE_CLUSTER_<NAME>_PASSWORD`` or
``file:<credential dir>/<name>/<file>``). A new or changed cluster is connected to only after its test
passes."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from access.permissions import is_admin
from pipelines import clusters, registries
from pipelines.models import DEFAULT_CLUSTER_NAME, KafkaCluster
from streamforge_core.kafka import SASL_MECHANISMS, SECURITY_PROTOCOLS


class ClusterForm(forms.Form):
    """A named cluster's settings; the rules spanning fields are ``clusters.validate``'s, shown beside each
    field."""

    name = forms.CharField(max_length=63, help_text="lower-case letters, digits and '-'; fixed once created")
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    bootstrap_servers = forms.CharField(max_length=1000, help_text="host:port, comma-separated")
    security_protocol = forms.ChoiceField(choices=[(p, p) for p in SECURITY_PROTOCOLS])
    sasl_mechanism = forms.ChoiceField(
        choices=[("", "(no SASL)"), *[(m, m) for m in SASL_MECHANISMS]], required=False
    )
    sasl_username = forms.CharField(max_length=255, required=False)
    password_ref = forms.CharField(
        max_length=1000,
        required=False,
        label="Password reference",
        help_text=(
            "where the password is, never the password: env:STREAMFORGE_CLUSTER_<NAME>_PASSWORD or "
            "file:/run/secrets/<cluster name>/<file>"
        ),
    )
    ssl_ca_location = forms.CharField(
        max_length=1000,
        required=False,
        label="CA file (PEM)",
        help_text="in the cluster's own credential folder, like the certificate and key",
    )
    ssl_certificate_location = forms.CharField(
        max_length=1000, required=False, label="Client certificate file (PEM, for mTLS)"
    )
    ssl_key_location = forms.CharField(max_length=1000, required=False, label="Client key file (PEM)")
    verify_hostname = forms.BooleanField(
        required=False, initial=True, help_text="check the broker's certificate names the host (keep on)"
    )
    registry_url = forms.CharField(
        max_length=1000,
        required=False,
        label="Schema registry URL",
        help_text="Confluent-compatible API, e.g. https://registry:8081 or http://apicurio:8080/apis/ccompat/v7",
    )
    registry_username = forms.CharField(max_length=255, required=False, label="Registry user (basic auth)")
    registry_password_ref = forms.CharField(
        max_length=1000,
        required=False,
        label="Registry password reference",
        help_text="env:STREAMFORGE_CLUSTER_<NAME>_REGISTRY_PASSWORD or file:<path in the cluster's folder>",
    )
    registry_ca_location = forms.CharField(max_length=1000, required=False, label="Registry CA file (PEM)")
    registry_certificate_location = forms.CharField(
        max_length=1000, required=False, label="Registry client certificate (PEM, for mTLS)"
    )
    registry_key_location = forms.CharField(
        max_length=1000, required=False, label="Registry client key (PEM)"
    )

    def __init__(self, *args: Any, editing: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if editing:
            del self.fields["name"]


def _admin(request: HttpRequest) -> User:
    user = request.user
    if not isinstance(user, User) or not is_admin(user):
        raise PermissionDenied("Kafka clusters are managed by admins")
    return user


def _row(name: str) -> KafkaCluster:
    row = KafkaCluster.objects.filter(name=name).first()
    if row is None:
        raise Http404(f"no Kafka cluster named {name}")
    return row


def _list(request: HttpRequest, checked: clusters.ClusterCheck | None = None) -> HttpResponse:
    shown = [clusters.describe(c) for c in clusters.clusters()]
    return render(
        request, "pipelines/clusters.html", {"clusters": shown, "checked": checked, "section": "clusters"}
    )


@login_required
def cluster_list(request: HttpRequest) -> HttpResponse:
    """``/clusters/``: every cluster, the default first."""
    _admin(request)
    return _list(request)


@login_required
@require_POST
def cluster_test(request: HttpRequest, name: str) -> HttpResponse:
    """Connect to the cluster now and show what was found above the list; a pass approves its settings
    (audited, ``clusters.check_cluster``)."""
    actor = _admin(request)
    row = None if name == DEFAULT_CLUSTER_NAME else _row(name)
    return _list(request, clusters.check_cluster(actor=actor, cluster=row))


@login_required
def cluster_edit(request: HttpRequest, name: str | None = None) -> HttpResponse:
    """``/clusters/new/`` and ``/clusters/<name>/edit/``: the form; a refused setting comes back beside its
    field (status 400)."""
    actor = _admin(request)
    row = _row(name) if name is not None else None
    if request.method != "POST":
        initial = {f: getattr(row, f) for f in clusters.ALL_FIELDS} if row is not None else {}
        form = ClusterForm(initial=initial, editing=row is not None)
        context = {
            "form": form,
            "cluster": row,
            "section": "clusters",
            "try_seconds": int(clusters.TRY_TIMEOUT_SECONDS * 2),
        }
        return render(request, "pipelines/cluster_form.html", context)
    form = ClusterForm(request.POST, editing=row is not None)
    if request.POST.get("action") == "test":
        return _try(request, actor, form, row)
    if form.is_valid():
        try:
            saved = clusters.save_cluster(actor=actor, values=form.cleaned_data, cluster=row)
        except clusters.ClusterError as exc:
            for field, problems in exc.errors.items():
                for problem in problems:
                    form.add_error(field if field in form.fields else None, problem)
        else:
            messages.success(
                request,
                f"Cluster {saved.name} saved. Nothing connects to it until its connection test below passes.",
            )
            return redirect("cluster-list")
    context = {
        "form": form,
        "cluster": row,
        "section": "clusters",
        "try_seconds": int(clusters.TRY_TIMEOUT_SECONDS * 2),
    }
    return render(request, "pipelines/cluster_form.html", context, status=400)


def _try(request: HttpRequest, actor: User, form: ClusterForm, row: KafkaCluster | None) -> HttpResponse:
    """The form's "Test connection": the typed settings tried once, unsaved (``clusters.try_settings``), the
    answer shown above the form, which keeps what was typed (the password is a reference: nothing secret is
    typed, so nothing secret comes back). Refused settings come back beside their field (status 400)."""
    context: dict[str, Any] = {
        "form": form,
        "cluster": row,
        "section": "clusters",
        "try_seconds": int(clusters.TRY_TIMEOUT_SECONDS * 2),
    }
    if form.is_valid():
        try:
            tried = clusters.try_settings(actor=actor, values=form.cleaned_data, cluster=row)
        except clusters.ClusterError as exc:
            for field, problems in exc.errors.items():
                for problem in problems:
                    form.add_error(field if field in form.fields else None, problem)
        else:
            name = row.name if row is not None else form.cleaned_data["name"]
            registry = registries.try_registry(actor=actor, values=form.cleaned_data, cluster=name)
            context.update(
                tried=tried,
                tried_verdict=clusters.try_verdict(tried),
                tried_ok=clusters.connected(tried) and (registry is None or registry.ok),
                tried_registry=registry,
            )
            return render(request, "pipelines/cluster_form.html", context)
    return render(request, "pipelines/cluster_form.html", context, status=400)


@login_required
@require_POST
def cluster_delete(request: HttpRequest, name: str) -> HttpResponse:
    """Delete an unused cluster; its name typed again (``confirm_name``) is the confirmation."""
    actor = _admin(request)
    row = _row(name)
    if request.POST.get("confirm_name", "").strip() != row.name:
        messages.error(request, f"Type {row.name} to confirm deleting it; nothing was deleted.")
        return redirect("cluster-list")
    try:
        clusters.delete_cluster(actor=actor, cluster=row)
    except clusters.ClusterInUse as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Cluster {name} deleted.")
    return redirect("cluster-list")
