"""``service-network crd``: print the ``skupper.io`` CustomResourceDefinitions as YAML (for ``kubectl apply``)."""

from __future__ import annotations

import argparse

from operator_runtime.crdgen import add_output_argument, write_output

from .generate import crds_yaml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_output_argument(parser)


async def run(args: argparse.Namespace) -> int:
    return await write_output(crds_yaml(), args.output)
