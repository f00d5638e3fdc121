"""Where Fennel code finds the HTTP library Fennel vendors: ``fennel._vendor.requests``.

Fennel ships a copy of ``requests`` under its own package, and code written for Fennel
compares ``log`` answers with ``requests.codes.OK`` imported from there. Here that name is the
``requests`` package itself (a dependency), so such code runs with only its imports changed.
"""

import sys

import requests

sys.modules[f"{__name__}.requests"] = requests

__all__ = ["requests"]
