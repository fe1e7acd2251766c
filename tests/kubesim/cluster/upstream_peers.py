"""Where tests find upstream Skupper's built programs (``../shared/peers/``, or ``$UPSTREAM_PEERS``).

``peers()`` returns the directory, or skips the calling test saying what is missing; with
``$REQUIRE_UPSTREAM_PEERS=1`` (CI) a missing directory fails the test instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devenv.upstream_images import PEERS_VARIABLE, peers_dir

REQUIRE_VARIABLE = "REQUIRE_UPSTREAM_PEERS"


def peers() -> Path:
    where = peers_dir()
    if (where / "skupper-2.2.1" / "bin" / "controller").is_file():
        return where
    reason = (f"upstream Skupper's programs are missing: {where}/skupper-2.2.1/bin/controller does not exist "
              f"(../shared/peers/ beside the checkout, or ${PEERS_VARIABLE})")
    if os.environ.get(REQUIRE_VARIABLE) == "1":
        pytest.fail(f"{reason} (${REQUIRE_VARIABLE}=1: they are required here)", pytrace=False)
    raise pytest.skip.Exception(reason, _use_item_location=True)
