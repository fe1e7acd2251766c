"""``listener-operator check overrides``: which Listeners of a cluster have ``objectOverrides`` this operator would
refuse (docs/migrating-from-upstream.md, "Listener objectOverrides").

Upstream merges a Listener's ``objectOverrides`` into its Service whatever they change; this operator refuses the
changes that widen what the ListenerClass exposes unless the class allows them (behaviour.md "Override policy").
Run against the cluster before switching, this reads every Listener and ListenerClass (nothing is written) and
judges each Listener's overrides with the controller's own code: exit code 0 when all of them apply, 1 with one line
per Listener that would lose its Service (a new one) or its updates (an existing one), 2 when the cluster cannot be
read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from listener_operator.kinds import LISTENER, LISTENER_CLASS
from listener_operator.listener_controller.service import (
    InvalidServiceOverrideError,
    ListenerError,
    ServiceOverrideNotAllowedError,
    build_service,
    parse_listener_class,
)
from listener_operator.messages import cut
from operator_runtime.config import ConfigError, make_api
from operator_runtime.errors import KubeError
from operator_runtime.objects import items, mapping, meta

__all__ = ["Refusal", "add_arguments", "refused_overrides", "run"]

_MESSAGE_LIMIT = 1000


@dataclass(frozen=True)
class Refusal:
    """A Listener whose overrides would be refused: where, the condition reason it would get, and why."""

    listener: str
    reason: str
    message: str


def refused_overrides(listeners: Iterable[Mapping[str, Any]], classes: Iterable[Mapping[str, Any]]
                      ) -> list[Refusal]:
    """The Listeners with ``objectOverrides`` that :func:`build_service` refuses under their class. Listeners
    without overrides, and those whose class is missing or invalid (a problem either operator reports the same
    way), are not judged."""
    by_name = {meta(c).name: c for c in classes}
    refusals: list[Refusal] = []
    for listener in listeners:
        spec = mapping(listener, "spec")
        listener_class = by_name.get(str(spec.get("className") or ""))
        if not items(spec, "objectOverrides") or listener_class is None:
            continue
        where = f"{meta(listener).namespace}/{meta(listener).name}"
        try:
            build_service(listener, parse_listener_class(listener_class))
        except (ServiceOverrideNotAllowedError, InvalidServiceOverrideError) as error:
            refusals.append(Refusal(where, error.reason, str(error)))
        except ListenerError:
            continue
    return sorted(refusals, key=lambda r: r.listener)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    parser.add_argument("--context", default=None, help="the kubeconfig context to use")


async def run(args: argparse.Namespace) -> int:
    try:
        api = make_api(args.kubeconfig, context=args.context)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        listeners, _ = await api.list(LISTENER, page_size=500)
        classes, _ = await api.list(LISTENER_CLASS, page_size=500)
    except KubeError as error:
        print(f"error: cannot read Listeners and ListenerClasses: {cut(str(error), _MESSAGE_LIMIT)}",
              file=sys.stderr)
        return 2
    finally:
        await api.close()
    with_overrides = sum(1 for listener in listeners if items(mapping(listener, "spec"), "objectOverrides"))
    refusals = refused_overrides(listeners, classes)
    for refusal in refusals:
        print(f"{refusal.listener}: {refusal.reason}: {cut(refusal.message, _MESSAGE_LIMIT)}")
    if refusals:
        print(f"{len(refusals)} of {len(listeners)} Listener(s) have objectOverrides this operator refuses: allow "
              "the fields in their ListenerClass's spec.allowedServiceOverrides, or change the overrides, before "
              "switching")
        return 1
    print(f"the objectOverrides of all {with_overrides} Listener(s) that have some apply under this operator "
          f"({len(listeners)} Listener(s) read)")
    return 0
