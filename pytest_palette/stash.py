"""Typed stash keys: the plugin's state lives on config and items, never in module globals."""

from __future__ import annotations

import pytest

from .hosts.base import Host
from .options import Settings
from .runner import RunRecord

SETTINGS = pytest.StashKey[Settings]()
HOSTS = pytest.StashKey[dict[str, Host]]()
RUN_ID = pytest.StashKey[str]()
#: case name → where it was first defined, to refuse a duplicate in another file.
CASE_NAMES = pytest.StashKey[dict[str, str]]()

HOST_NAME = pytest.StashKey[str]()
RECORD = pytest.StashKey[RunRecord]()
