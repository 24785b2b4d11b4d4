"""URLs of single sign-on: allauth's OpenID Connect sign-in and callback (``/accounts/oidc/<id>/login/``,
``.../login/callback/``: the redirect URI to register with a provider), and our pages around them (named as
allauth reverses them: ``account_inactive``, ``socialaccount_login_cancelled``)."""

from django.urls import URLPattern, URLResolver, path
from django.views.generic import RedirectView

from access.sso import provider, views

urlpatterns: list[URLPattern | URLResolver] = [
    path("accounts/oidc/<str:provider_id>/login/", provider.login_view, name="openid_connect_login"),
    path(
        "accounts/oidc/<str:provider_id>/login/callback/",
        provider.callback_view,
        name="openid_connect_callback",
    ),
    path("sso/no-team/", views.no_team, name="sso-no-team"),
    path("sso/inactive/", views.inactive, name="account_inactive"),
    path(
        "sso/cancelled/",
        RedirectView.as_view(pattern_name="login", query_string=False),
        name="socialaccount_login_cancelled",
    ),
]
