"""The real Label Studio, started and driven as a user would (the tests of tests/labelling and
tools/label_studio_screenshots.py): `server.LabelStudio` starts `label-studio` from its own environment
(.venv-label-studio, `make test` builds it) on a free loopback port and acts in it through its SDK (`driver.py`, run
in that environment)."""
