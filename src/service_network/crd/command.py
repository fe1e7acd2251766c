"""``service-network crd``: print the ``skupper.io`` CustomResourceDefinitions as YAML (for ``kubectl apply``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from .generate import crds_yaml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", "-o", metavar="FILE", default="-",
                        help="write the YAML to FILE instead of standard output")


async def run(args: argparse.Namespace) -> int:
    text = crds_yaml()
    if args.output == "-":
        sys.stdout.write(text)
    else:
        await asyncio.to_thread(Path(args.output).write_text, text, encoding="utf-8")
    return 0
