"""A system site's resource files (pure): YAML text -> resources, each with the file and line it came from.

A document is checked as ``kubectl apply`` has the API server check a custom resource, with kubectl's strict field
validation: against the structural schema of its kind's CRD (``crd/generate.py``, the schemas the Kubernetes sites
serve), a field the schema does not declare or a field given twice is refused with the API server's words
(``strict decoding error: unknown field "spec.prot"``), and so is a value of the wrong type, a missing required
field or a value outside an enum (``spec.port: Invalid value: "string": spec.port in body must be of type integer:
"string"``). A refused document is not used at all; its problem names the file, the line and the field
(``site.yaml:9: Listener "backend": strict decoding error: unknown field "spec.prot"``).

What a document can cost is bounded: a file of at most :data:`MAX_FILE` bytes, :data:`MAX_RESOURCES` documents,
:data:`MAX_FIELDS` fields walked (YAML aliases can make a small file a large tree), and messages quote at most
:data:`MAX_QUOTED` characters of what the file says.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from operator_runtime.objects import JsonDict

from ..crd.generate import all_crds
from .names import API_VERSION, KINDS, SECRET, TLS_FILES

__all__ = ["KINDS", "MAX_FIELDS", "MAX_FILE", "MAX_RESOURCES", "FieldProblem", "ResourceFile", "field_problem",
           "load_resources", "secret_files", "split_documents"]

MAX_FILE = 1024 * 1024
MAX_RESOURCES = 1000
MAX_FIELDS = 100_000
MAX_QUOTED = 64
MAX_FINDINGS = 20
#: ObjectMeta's fields: what ``metadata`` may hold (the API server decodes it as ObjectMeta, not by the schema)
OBJECT_META = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields"})
#: required by the CRD, defaulted by a system site (docs/skupper-cli.md): RouterAccess's server certificate is made
#: by the site itself, as ``skupper-site-server`` unless named
DEFAULTED_HERE = {"RouterAccess": frozenset({"spec.tlsCredentials"})}
_FIELD_PATH = re.compile(r"(?:spec|metadata|status)(?:\.[A-Za-z0-9_-]+|\[\d+\])*")


@dataclass(frozen=True)
class ResourceFile:
    """A resource read from a file (``obj``), or why a document or the whole file could not be used
    (``problem``: the whole message, naming the file, the line and the field)."""

    path: Path
    obj: JsonDict | None
    problem: str | None = None
    shown: str = ""                                    # how messages name the file (default: its path)
    line: int = 1                                      # where the document starts
    lines: Mapping[str, int] = field(default_factory=dict)   # field path (spec.port) -> its line

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind")) if self.obj is not None else ""

    @property
    def name(self) -> str:
        metadata = self.obj.get("metadata") if self.obj is not None else None
        return str(metadata.get("name")) if isinstance(metadata, dict) else ""

    def line_of(self, message: str, field_path: str | None = None) -> int:
        """The line of ``field_path``, else of the field ``message`` starts with (``spec.port: ...``), or of its
        closest parent that is in the file; else the document's first line."""
        found = _FIELD_PATH.match(message)
        path = field_path or (found.group(0) if found else "")
        while path:
            if path in self.lines:
                return self.lines[path]
            path = re.sub(r"(\.[^.\[]+|\[\d+\])$", "", path) if re.search(r"[.\[]", path) else ""
        return self.line

    def describe(self, message: str, field_path: str | None = None) -> str:
        """``message`` about this resource, prefixed with its file, line and name."""
        where = f"{self.shown or self.path}:{self.line_of(message, field_path)}"
        return f'{where}: {self.kind} "{self.name}": {message}'


def _quoted(value: object) -> str:
    text = str(value)
    return repr(text if len(text) <= MAX_QUOTED else text[:MAX_QUOTED] + "...")


# ---- YAML with lines ----------------------------------------------------------------------------------------------

class _Budget:
    def __init__(self) -> None:
        self.left = MAX_FIELDS

    def take(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise _TooLarge


class _TooLarge(Exception):
    pass


def split_documents(text: str) -> list[str]:
    """The text of each document of ``text`` (comments between documents are not kept); ``yaml.YAMLError`` as
    PyYAML raises it."""
    return [text[node.start_mark.index:node.end_mark.index].rstrip("\n") + "\n" for node, _ in _documents(text)]


def _documents(text: str) -> list[tuple[yaml.Node, Any]]:
    """Each document of ``text`` as its node tree (for lines) and its value, empty documents left out (as kubectl
    does: a stream may end with ``---``); ``yaml.YAMLError`` as PyYAML raises it."""
    loader = yaml.SafeLoader(text)
    out: list[tuple[yaml.Node, Any]] = []
    try:
        while loader.check_node() and len(out) <= MAX_RESOURCES:
            node = loader.get_node()
            if node is None:
                break
            value = loader.construct_document(node)
            if value is not None:
                out.append((node, value))
    finally:
        loader.dispose()   # type: ignore[no-untyped-call]
    return out


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(node: yaml.Node, path: str, lines: dict[str, int], duplicates: dict[str, int], budget: _Budget) -> None:
    """Record the line of every field under ``node`` and the fields given twice (with the line of the second)."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            budget.take()
            if not isinstance(key, yaml.ScalarNode):
                continue
            child = _child(path, str(key.value))
            if child in seen:
                duplicates.setdefault(child, key.start_mark.line + 1)
            seen.add(child)
            lines.setdefault(child, key.start_mark.line + 1)
            _walk(value, child, lines, duplicates, budget)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            budget.take()
            child = f"{path}[{i}]"
            lines.setdefault(child, item.start_mark.line + 1)
            _walk(item, child, lines, duplicates, budget)


# ---- the schema check -----------------------------------------------------------------------------------------------

@functools.cache
def _schemas() -> dict[str, dict[str, Any]]:
    """Kind -> the ``openAPIV3Schema`` of its CRD (served version)."""
    out = {}
    for crd in all_crds():
        kind = crd["spec"]["names"]["kind"]
        version = next(v for v in crd["spec"]["versions"] if v.get("served"))
        out[kind] = version["schema"]["openAPIV3Schema"]
    return out


_JSON_TYPES = (("boolean", bool), ("string", str), ("object", dict), ("array", list))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    for name, python in _JSON_TYPES:
        if isinstance(value, python):
            return name
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"      # YAML timestamps and the like: the API server sees them as strings


def _type_matches(value: Any, type_name: str) -> bool:
    actual = _json_type(value)
    return actual == type_name or (type_name == "number" and actual == "integer")


def _go_quoted(value: Any) -> str:
    """A value as the API server prints one in ``Unsupported value: ...``."""
    if isinstance(value, str):
        text = value if len(value) <= MAX_QUOTED else value[:MAX_QUOTED] + "..."
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return _quoted(value)


@dataclass
class _Findings:
    unknown: list[str] = field(default_factory=list)                  # strict decoding errors: the fields
    invalid: list[tuple[str, str]] = field(default_factory=list)      # causes of an Invalid: (message, field)


def _check(value: Any, schema: Mapping[str, Any], path: str, found: _Findings, budget: _Budget) -> None:
    """``value`` against one schema node, as the API server does after decoding: type, enum, then the fields."""
    budget.take()
    expected = "integer,string" if schema.get("x-kubernetes-int-or-string") else schema.get("type")
    if value is None:
        if not schema.get("nullable") and isinstance(expected, str):
            found.invalid.append((f'{path}: Invalid value: "null": {path} in body must be of type {expected}: '
                                  f'"null"', path))
        return
    if isinstance(expected, str) and expected and not any(_type_matches(value, t) for t in expected.split(",")):
        actual = _json_type(value)
        found.invalid.append((f'{path}: Invalid value: "{actual}": {path} in body must be of type {expected}: '
                              f'"{actual}"', path))
        return
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and value not in enum:
        found.invalid.append((f"{path}: Unsupported value: {_go_quoted(value)}: supported values: "
                              + ", ".join(_go_quoted(v) for v in enum), path))
    if isinstance(value, dict):
        _check_object(value, schema, path, found, budget)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            _check(item, schema["items"], f"{path}[{i}]", found, budget)


def _check_object(value: dict[Any, Any], schema: Mapping[str, Any], path: str, found: _Findings,
                  budget: _Budget) -> None:
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or additional is True
    for key, item in value.items():
        child = _child(path, str(key))
        if key in properties:
            _check(item, properties[key], child, found, budget)
        elif isinstance(additional, Mapping):
            _check(item, additional, child, found, budget)
        elif not keep_unknown:
            found.unknown.append(child)
    for required in schema.get("required") or []:
        if required not in value:
            found.invalid.append((f"{_child(path, required)}: Required value", path))


@dataclass(frozen=True)
class FieldProblem:
    """What the API server would refuse in a resource: its message and the first field it names."""

    message: str
    field: str


def field_problem(obj: Mapping[str, Any]) -> FieldProblem | None:
    """What the API server would refuse in ``obj`` (a ``skupper.io/v2alpha1`` resource of one of :data:`KINDS`)
    under kubectl's strict field validation, or None."""
    return _field_problem(obj, {}, _Budget())


def _field_problem(obj: Mapping[str, Any], duplicates: Mapping[str, int], budget: _Budget) -> FieldProblem | None:
    """Unknown and duplicate fields are one strict decoding error (reported alone, as the server stops at
    decoding); else the causes of an Invalid (type, required, enum)."""
    schema = _schemas()[str(obj.get("kind"))]
    found = _Findings()
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if key == "metadata":
            if isinstance(value, dict):
                found.unknown += [f"metadata.{k}" for k in value if k not in OBJECT_META]
            continue
        if key in schema.get("properties", {}):
            _check(value, schema["properties"][key], str(key), found, budget)
        else:
            found.unknown.append(str(key))
    defaulted = DEFAULTED_HERE.get(str(obj.get("kind")), frozenset())
    found.invalid = [(m, f) for m, f in found.invalid if m.removesuffix(": Required value") not in defaulted]
    strict = [(f'duplicate field "{d}"', d) for d in duplicates] + [(f'unknown field "{u}"', u)
                                                                     for u in found.unknown]
    if strict:
        return FieldProblem("strict decoding error: " + ", ".join(_limit([m for m, _ in strict])), strict[0][1])
    if found.invalid:
        return FieldProblem("; ".join(_limit([m for m, _ in found.invalid])), found.invalid[0][1])
    return None


def _limit(items: list[str]) -> list[str]:
    if len(items) <= MAX_FINDINGS:
        return items
    return [*items[:MAX_FINDINGS], f"and {len(items) - MAX_FINDINGS} more"]


# ---- files ----------------------------------------------------------------------------------------------------------

#: what a ``v1`` Secret may hold (the API server's Secret type), and the types that hold TLS credentials
SECRET_FIELDS = frozenset({"apiVersion", "kind", "metadata", "data", "stringData", "type", "immutable"})
SECRET_TYPES = ("kubernetes.io/tls", "Opaque")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1123_MESSAGE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                   "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                   "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def secret_files(secret: Mapping[str, Any]) -> dict[str, bytes]:
    """The TLS files (``ca.crt``, ``tls.crt``, ``tls.key``) a Secret that passed :func:`_secret_problem` holds:
    from ``data`` (base64), ``stringData`` winning, as the API server merges them; other keys are not used."""
    import base64
    files = {k: base64.b64decode(str(v), validate=True) for k, v in (secret.get("data") or {}).items()
             if k in TLS_FILES}
    files.update({k: str(v).encode() for k, v in (secret.get("stringData") or {}).items() if k in TLS_FILES})
    return files


def _secret_problem(document: Mapping[str, Any]) -> FieldProblem | None:
    """What the API server would refuse in a Secret, and what makes one no TLS credential."""
    import base64
    import binascii
    unknown = [str(k) for k in document if k not in SECRET_FIELDS]
    metadata = document.get("metadata")
    if isinstance(metadata, dict):
        unknown += [f"metadata.{k}" for k in metadata if k not in OBJECT_META]
    if unknown:
        return FieldProblem("strict decoding error: " + ", ".join(f'unknown field "{u}"' for u in unknown),
                            unknown[0])
    name = str(metadata.get("name") or "") if isinstance(metadata, dict) else ""
    if len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        return FieldProblem(f"metadata.name: Invalid value: {_go_quoted(name)}: {DNS1123_MESSAGE}", "metadata.name")
    kind = document.get("type", "Opaque")
    if kind not in SECRET_TYPES:
        return FieldProblem(f"type: Unsupported value: {_go_quoted(kind)}: supported values (a TLS credential): "
                            + ", ".join(_go_quoted(t) for t in SECRET_TYPES), "type")
    for section in ("data", "stringData"):
        value = document.get(section)
        if value is not None and not isinstance(value, dict):
            return FieldProblem(f"{section}: Invalid value: must be a map of keys to values", section)
    for key, value in (document.get("data") or {}).items():
        try:
            base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError) as e:
            return FieldProblem(f"data[{key}]: Invalid value: not base64: {e}", f"data.{key}")
    keys = set(document.get("data") or {}) | set(document.get("stringData") or {})
    if kind == "kubernetes.io/tls":
        for key in ("tls.crt", "tls.key"):
            if key not in keys:
                return FieldProblem(f"data[{key}]: Required value", "data")
    elif not keys & set(TLS_FILES):
        return FieldProblem(f"data: Required value: a TLS credential ({', '.join(TLS_FILES)})", "data")
    return None


def _shape_problem(document: Any) -> str | None:
    """Why ``document`` is not a resource a system site serves, or None (a Secret's own checks: :func:`
    _secret_problem`)."""
    if not isinstance(document, dict):
        return "not a resource (a mapping with apiVersion and kind)"
    if document.get("kind") == SECRET and document.get("apiVersion") == "v1":
        return None
    if document.get("apiVersion") != API_VERSION:
        return f"apiVersion: must be {API_VERSION} (is {_quoted(document.get('apiVersion'))})"
    if document.get("kind") not in KINDS:
        return f"kind: {_quoted(document.get('kind'))} is not one of {', '.join(KINDS)}"
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        return "metadata.name: Required value"
    if "spec" not in document and document.get("kind") == "Site":
        return None                           # as the CRD: a Site's spec is optional (every field has a default)
    if not isinstance(document.get("spec"), dict):
        return "spec: Required value"
    return None


def _resource(path: Path, shown: str, node: yaml.Node, document: Any) -> ResourceFile:
    lines: dict[str, int] = {}
    duplicates: dict[str, int] = {}
    budget = _Budget()
    start = node.start_mark.line + 1
    try:
        _walk(node, "", lines, duplicates, budget)
        shape = _shape_problem(document)
        if shape is not None:
            return ResourceFile(path, None, f"{shown}:{lines.get(shape.split(':')[0], start)}: {shape}", shown,
                                start, lines)
        if document.get("kind") == SECRET:
            problem = (FieldProblem("strict decoding error: " + ", ".join(f'duplicate field "{d}"' for d in duplicates),
                                    next(iter(duplicates))) if duplicates else _secret_problem(document))
        else:
            problem = _field_problem(document, duplicates, budget)
    except _TooLarge:
        return ResourceFile(path, None, f"{shown}:{start}: more than {MAX_FIELDS} fields (YAML aliases?)", shown,
                            start)
    resource = ResourceFile(path, document, None, shown, start, {**lines, **duplicates})
    if problem is not None:
        return ResourceFile(path, None, resource.describe(problem.message, problem.field), shown, start, lines)
    return resource


def load_resources(path: Path, text: str, shown: str | None = None) -> list[ResourceFile]:
    """The resources of one YAML file (a stream of documents); each document that cannot be used is reported with
    the file (``shown``, default ``path``), its line and the field."""
    label = shown or str(path)
    try:
        documents = _documents(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark is not None else label
        return [ResourceFile(path, None, f"{where}: not YAML: {str(getattr(e, 'problem', None) or e)[:200]}", label)]
    except RecursionError:
        return [ResourceFile(path, None, f"{label}: not usable: nested too deeply", label)]
    out = [_resource(path, label, node, document) for node, document in documents[:MAX_RESOURCES]]
    if len(documents) > MAX_RESOURCES:
        out.append(ResourceFile(path, None, f"{label}: more than {MAX_RESOURCES} documents", label))
    return out


def one_of_each(files: Sequence[ResourceFile]) -> list[ResourceFile]:
    """``files`` with one resource of each kind and name: the one in ``<Kind>-<name>.yaml`` (the file ``skupper
    system apply`` writes) if any, else the first read; each other becomes a problem naming the one in use."""
    first: dict[tuple[str, str], ResourceFile] = {}
    for resource in files:
        if resource.obj is not None:
            key = (resource.kind, resource.name)
            known = first.get(key)
            if known is None or (resource.path.name == f"{key[0]}-{key[1]}.yaml"
                                 and known.path.name != resource.path.name):
                first[key] = resource
    out = []
    for resource in files:
        used = first.get((resource.kind, resource.name)) if resource.obj is not None else None
        if used is None or used is resource:
            out.append(resource)
            continue
        out.append(ResourceFile(resource.path, None, resource.describe(
            f"not in use: {used.shown or used.path}:{used.line} defines {resource.kind} \"{resource.name}\" too, "
            f"and that one is in use (a site has one {resource.kind} of a name: remove or rename one of them)"),
            resource.shown, resource.line, resource.lines))
    return out

