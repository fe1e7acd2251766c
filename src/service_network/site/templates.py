"""Label and annotation templates (pure), as upstream's controller applies them (its
``internal/kube/site/labels/registry.go``): a ConfigMap labelled ``skupper.io/label-template`` (any value) in a site's
namespace, or in the controller's namespace for every site, gives objects the controller makes its own labels and
annotations:

- the template's labels become labels of the object, its annotations annotations; never ``skupper.io/label-template``
  itself, ``kubectl.kubernetes.io/last-applied-configuration``, nor the keys listed in ``data.exclude``
  (comma-separated);
- ``data.name`` and ``data.kind``, when present, restrict it to the objects of that name and kind (``Deployment``,
  ``Service``, ``ConfigMap``, ``Certificate``, ``Secret``; both router Deployments are named ``skupper-router`` for
  this, as upstream names them when it applies templates); ``data.labelSelector`` (a label selector) to the objects
  whose own labels it matches; a template whose selector does not parse is ignored, as upstream's;
- the site namespace's templates apply first and the controller namespace's after them (a key in both takes the
  controller namespace's value, as upstream), each namespace's in name order.

Where this differs from upstream's (which only ever adds): a key a template set leaves the object when the template
stops giving it (the ConfigMap deleted or changed, its label removed), and only such a key; a key the controller
sets itself is never replaced by a template's. To know which keys it set, the controller records them on the object
in :data:`ANNOTATION_KEYS` (present only while a template applies).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operator_runtime.objects import JsonDict, mapping, meta

from .selector import LabelSelector, SelectorError, parse_selector

__all__ = ["ANNOTATION_KEYS", "DEPLOYMENT_NAME", "LABEL_TEMPLATE", "Extra", "Template", "metadata_patch",
           "parse_template", "recorded", "template_metadata", "templates_for", "up_to_date", "with_extra"]

#: Marks a ConfigMap as a template (upstream's label; its value does not matter).
LABEL_TEMPLATE = "skupper.io/label-template"
#: On an object templates gave keys: which (JSON: ``{"annotations": [...], "labels": [...]}``).
ANNOTATION_KEYS = "internal.skupper.io/label-template-keys"
#: The name router Deployments are matched by (upstream applies templates to each as ``skupper-router``).
DEPLOYMENT_NAME = "skupper-router"
_ALWAYS_EXCLUDED = frozenset({LABEL_TEMPLATE, "kubectl.kubernetes.io/last-applied-configuration"})
#: data keys a template may have (what a cache keeps of a template ConfigMap)
DATA_KEYS = ("name", "kind", "labelSelector", "exclude")


@dataclass(frozen=True)
class Template:
    """One template ConfigMap, parsed."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    match_name: str | None = None
    match_kind: str | None = None
    selector: LabelSelector | None = None

    def applies(self, kind: str, name: str, labels: Mapping[str, str]) -> bool:
        return ((self.match_name is None or self.match_name == name)
                and (self.match_kind is None or self.match_kind == kind)
                and (self.selector is None or self.selector.matches(labels)))


def parse_template(config_map: Mapping[str, Any]) -> Template | None:
    """The template a ConfigMap holds; None when it is not one (no label) or is ignored (a selector that does not
    parse)."""
    obj_meta = meta(config_map)
    if LABEL_TEMPLATE not in obj_meta.labels:
        return None
    data = mapping(config_map, "data")

    def text(key: str) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) else None

    selector: LabelSelector | None = None
    selector_text = text("labelSelector")
    if selector_text:
        try:
            selector = parse_selector(selector_text)
        except SelectorError:
            return None
    excluded = _ALWAYS_EXCLUDED | {k for k in (text("exclude") or "").split(",") if k}
    return Template(obj_meta.namespace, obj_meta.name,
                    {k: v for k, v in sorted(obj_meta.labels.items()) if k not in excluded},
                    {k: v for k, v in sorted(obj_meta.annotations.items()) if k not in excluded},
                    text("name"), text("kind"), selector)


def templates_for(namespace: str, controller_namespace: str | None,
                  config_maps: Iterable[Mapping[str, Any]]) -> tuple[Template, ...]:
    """The templates that apply in ``namespace``, in the order they apply: the namespace's own, then the
    controller namespace's (each by name). ``config_maps``: the template ConfigMaps of both namespaces."""
    found = [t for t in (parse_template(c) for c in config_maps) if t is not None]
    own = sorted((t for t in found if t.namespace == namespace), key=lambda t: t.name)
    shared = sorted((t for t in found if controller_namespace and t.namespace == controller_namespace
                     and t.namespace != namespace), key=lambda t: t.name)
    return (*own, *shared)


@dataclass(frozen=True)
class Extra:
    """What templates give one object."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def record(self) -> str | None:
        """The value of :data:`ANNOTATION_KEYS` (None: nothing given)."""
        if not self.labels and not self.annotations:
            return None
        return json.dumps({"annotations": sorted(self.annotations), "labels": sorted(self.labels)},
                          separators=(",", ":"))


def template_metadata(templates: Sequence[Template], kind: str, name: str, labels: Mapping[str, str],
                      annotations: Mapping[str, str] | None = None) -> Extra:
    """What ``templates`` give the object of ``kind`` and ``name`` whose own labels and annotations (the
    controller's) are ``labels`` and ``annotations``: never one of those keys."""
    given_labels: dict[str, str] = {}
    given_annotations: dict[str, str] = {}
    for template in templates:
        if not template.applies(kind, name, labels):
            continue
        given_labels.update({k: v for k, v in template.labels.items() if k not in labels})
        given_annotations.update({k: v for k, v in template.annotations.items()
                                  if k not in (annotations or {}) and k != ANNOTATION_KEYS})
    return Extra(given_labels, given_annotations)


def with_extra(body: JsonDict, templates: Sequence[Template], kind: str | None = None,
               name: str | None = None) -> JsonDict:
    """``body`` with what ``templates`` give it (and the record of the keys) in its metadata; ``kind`` and
    ``name`` as the templates match it (default the body's)."""
    metadata = dict(body.get("metadata") or {})
    labels = dict(metadata.get("labels") or {})
    annotations = dict(metadata.get("annotations") or {})
    extra = template_metadata(templates, kind or str(body.get("kind")), name or str(metadata.get("name")), labels,
                              annotations)
    record = extra.record()
    if record is None:
        return body
    metadata["labels"] = {**labels, **extra.labels}
    metadata["annotations"] = {**annotations, **extra.annotations, ANNOTATION_KEYS: record}
    return {**body, "metadata": metadata}


def recorded(obj: Mapping[str, Any] | None) -> tuple[frozenset[str], frozenset[str]]:
    """(label keys, annotation keys) templates gave ``obj``, as recorded on it."""
    text = meta(obj).annotations.get(ANNOTATION_KEYS) if obj is not None else None
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        value = {}
    if not isinstance(value, dict):
        return frozenset(), frozenset()

    def keys(name: str) -> frozenset[str]:
        listed = value.get(name)
        return frozenset(str(k) for k in listed) if isinstance(listed, list) else frozenset()
    return keys("labels"), keys("annotations")


def up_to_date(desired: Mapping[str, Any], live: Mapping[str, Any] | None) -> bool:
    """Whether ``live`` has every label and annotation of ``desired`` and the same record of template keys (a key
    to take away is a difference)."""
    if live is None:
        return False
    for part in ("labels", "annotations"):
        have = mapping(live, "metadata", part)
        if any(have.get(k) != v for k, v in mapping(desired, "metadata", part).items()):
            return False
    return (mapping(desired, "metadata", "annotations").get(ANNOTATION_KEYS)
            == mapping(live, "metadata", "annotations").get(ANNOTATION_KEYS))


def metadata_patch(desired: Mapping[str, Any], live: Mapping[str, Any]) -> JsonDict | None:
    """The merge patch giving ``live`` the labels and annotations of ``desired`` and taking away the keys templates
    gave it that ``desired`` no longer has (guarded by ``live``'s resourceVersion); None when it has them."""
    if up_to_date(desired, live):
        return None
    given_labels, given_annotations = recorded(live)
    patch: JsonDict = {"resourceVersion": meta(live).resource_version}
    for part, given in (("labels", given_labels), ("annotations", given_annotations | {ANNOTATION_KEYS})):
        wanted = dict(mapping(desired, "metadata", part))
        have = mapping(live, "metadata", part)
        changes: dict[str, str | None] = {k: None for k in given if k in have and k not in wanted}
        changes.update({k: v for k, v in wanted.items() if have.get(k) != v})
        if changes:
            patch[part] = changes
    return {"metadata": patch}
