"""Tests of the conformance suite itself: it runs on test adapters through pytester."""

pytest_plugins = ["pytester"]
