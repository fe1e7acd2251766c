"""kubesim runs the project's image as the Containerfile defines it: devenv.image's entrypoint, command, PATH and
environment are the Containerfile's, and the programs the image has (``/opt/listener-operator/bin``) are this
virtualenv's console scripts."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from devenv.image import CMD, ENTRYPOINT, ENV, IMAGE_BIN, project_image

CONTAINERFILE = Path(__file__).resolve().parents[2] / "Containerfile"


def instruction(name: str) -> str:
    """The argument of a Containerfile instruction, continuation lines joined."""
    text = CONTAINERFILE.read_text().replace("\\\n", " ")
    (found,) = re.findall(rf"^{name}\s+(.+)$", text, flags=re.MULTILINE)
    return found.strip()


def test_entrypoint_cmd_and_environment_are_the_containerfiles() -> None:
    assert tuple(json.loads(instruction("ENTRYPOINT"))) == ENTRYPOINT
    assert tuple(json.loads(instruction("CMD"))) == CMD
    env = dict(re.findall(r"(\w+)=(\S+)", instruction("ENV")))
    assert env == ENV
    assert instruction("WORKDIR") == project_image().working_dir


def test_the_images_programs_are_this_virtualenvs_console_scripts() -> None:
    image = project_image()
    bin_dir = image.programs[IMAGE_BIN]
    assert bin_dir == Path(sys.executable).parent
    for script in ("listener-operator", "service-network"):
        assert (bin_dir / script).is_file(), script
    assert ENTRYPOINT[0] == f"{IMAGE_BIN}/listener-operator"
