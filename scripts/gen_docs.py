#!/usr/bin/env python3
"""Regenerate the docs site's reference pages (configuration, Helm values, HTTP API) and the
chart's README from the code; `--check` writes nothing and exits 1 when a committed page is out
of date."""

import sys

from ragindex.app.docs_site import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
