"""The one place the version is written (pyproject.toml and the package read it from here).

It lives in the core so that modules recording it (metrics, the status page) need not
import the top-level package, which is the public face above everything else.
"""

__version__ = "0.2.0"
