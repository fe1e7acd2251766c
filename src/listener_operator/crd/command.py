"""``listener-operator crd``: print the CustomResourceDefinitions as YAML (for ``kubectl apply -f -``)."""

from __future__ import annotations

import argparse

from listener_operator.crd.generate import crds_yaml
from operator_runtime.crdgen import add_output_argument, write_output


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_output_argument(parser)


async def run(args: argparse.Namespace) -> int:
    return await write_output(crds_yaml(), args.output)
