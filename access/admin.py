"""The admin site's registrations for access. DRF's ``authtoken`` registers a token admin that lists every
user's full API key to superusers; keys are shown once, at creation, and never again
(``access.api_tokens``), so that admin is removed (security review #28, finding 6). Tokens are created,
rotated and revoked on the account and people pages and the tokens API, which show a key's first
characters only."""

from django.contrib import admin
from rest_framework.authtoken.models import TokenProxy

# rest_framework.authtoken comes before access in INSTALLED_APPS, so its admin module has run by now.
if admin.site.is_registered(TokenProxy):
    admin.site.unregister(TokenProxy)
