"""The Content-Security-Policy of every page we serve or write.

Our pages show values from the table's storage, which anyone who can write that storage
controls (DESIGN 3.9). Escaping every value where it lands is the first defence; this policy
is the second: the pages need no script, so none may run, and nothing may be fetched. The
one inline stylesheet is allowed by its SHA-256 hash, so a ``<style>`` that slipped through
escaping would not apply either.

- :func:`meta_policy`: for a page written to a file (``memwal status --html``), in a
  ``<meta http-equiv>`` (which cannot carry ``frame-ancestors`` or ``sandbox``);
- :func:`header_policy`: for a page served over HTTP (the Airflow view), adding
  ``sandbox`` without ``allow-scripts`` or ``allow-forms``: no script can run in the page,
  whatever the iframe Airflow's UI creates allows (``allow-scripts``), and no form can be sent,
  so markup that slipped through escaping cannot act with the viewer's Airflow session. It
  keeps the page's own origin (``allow-same-origin``): a link followed inside the frame is then
  a same-site request that carries the session, where a sandboxed opaque origin made every
  link answer ``{"detail":"Not authenticated"}`` after a real login (Airflow's session cookie
  is SameSite=Lax); and the UI's address bar follows the frame again (docs/decisions/0057). Links
  may navigate the top window when clicked (``allow-top-navigation-by-user-activation``) where
  the frame allows it.
"""

from __future__ import annotations

import base64
import hashlib

#: Headers sent with every page we serve (besides the policy).
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def style_hash(css: str) -> str:
    """The CSP source that allows exactly the inline stylesheet ``css``."""
    digest = hashlib.sha256(css.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def meta_policy(css: str) -> str:
    """The policy of a page in a file: no script, no fetch, only its own stylesheet."""
    return (f"default-src 'none'; script-src 'none'; style-src {style_hash(css)}; img-src data:; "
            "base-uri 'none'; form-action 'none'")


def header_policy(css: str) -> str:
    """The policy of a page served over HTTP: :func:`meta_policy`, framed only by its own
    origin, and sandboxed: no script, no form, no plugin, no pop-up (its own origin is kept:
    see the module docstring)."""
    return (f"{meta_policy(css)}; frame-ancestors 'self'; "
            "sandbox allow-same-origin allow-top-navigation-by-user-activation")


__all__ = ["SECURITY_HEADERS", "header_policy", "meta_policy", "style_hash"]
