"""The real annotation tools, started and driven as a user would (the tests of tests/labelling and
tools/label_studio_screenshots.py), each from its own environment (`make test` builds them: .venv-label-studio,
.venv-doccano), on a free loopback port, its database in a folder the caller owns; only the processes started here
are stopped.

    label_studio.py          `label-studio start`; acted in through its SDK (label_studio_driver.py, run in its
                             environment)
    doccano.py               doccano's web server and its task worker; acted in through its REST API
    screenshots.py           pictures of Label Studio's pages (Playwright, Debian's Chromium)
"""
