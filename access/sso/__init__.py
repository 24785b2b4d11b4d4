"""Single sign-on through OpenID Connect (issue #33): identity providers from the environment (``config``),
the allauth provider that verifies every ID token (``provider``), what a sign-in does here (``adapters``,
``signin``), group-to-team mappings (``mapping``), SSO-only mode (``backends``) and RP-initiated logout
(``logout``)."""
