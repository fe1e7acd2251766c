"""The import contracts of pyproject.toml hold for the tree, and they do catch a forbidden import.

The check runs ``lint-imports`` (import-linter) with the project's own configuration against a copy of ``src/`` in
which modules gained a forbidden import: the product importing kubesim, and pure composition modules of both
products importing an HTTP library or the API client; the site controller's plan importing asyncio or the writer;
in a second copy, the service network importing the other
product; in a third, kubesim's circles coming back (the store's hooks and a server handler importing the store and
the server under ``if TYPE_CHECKING:`` only, which counts, and code in the cluster package's file).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    executable = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run([str(executable), "--no-cache", "--config", str(root / "pyproject.toml")], cwd=root,
                          env=env, capture_output=True, text=True, timeout=120)


def copy_tree(destination: Path) -> Path:
    shutil.copytree(REPO / "src", destination / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(REPO / "pyproject.toml", destination / "pyproject.toml")
    return destination


def test_the_contracts_fail_on_forbidden_imports(tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    (root / "src/listener_operator/leak.py").write_text('"""A forbidden import."""\n\nimport kubesim.sim  # noqa\n')
    service = root / "src/listener_operator/listener_controller/service.py"
    service.write_text(service.read_text() + "\nimport aiohttp  # noqa: E402\n")
    compose = root / "src/service_network/site/compose.py"
    compose.write_text(compose.read_text() + "\nimport operator_runtime.api  # noqa: E402\n")

    result = lint_imports(root)

    assert result.returncode != 0, result.stdout
    output = " ".join(result.stdout.split())  # the report wraps long contract names
    assert "The product imports neither the local cluster nor the development environment BROKEN" in output
    assert "listener_operator.leak -> kubesim.sim" in output
    assert ("Pure composition (Services, statuses, addresses, overrides, router documents, ports) does no I/O "
            "BROKEN") in output
    assert "listener_operator.listener_controller.service -> aiohttp" in output
    assert "service_network.site.compose -> operator_runtime.api" in output
    # the site controller's plan imports compose.py: its contract breaks too (indirect imports count)
    assert "service_network.site.plan -> service_network.site.compose" in output
    assert "11 kept, 3 broken" in output


def test_the_service_network_may_not_import_the_other_product(tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    (root / "src/service_network/leak.py").write_text('"""A forbidden import."""\n\nimport listener_operator.constants  # noqa\n')

    result = lint_imports(root)

    assert result.returncode != 0, result.stdout
    output = " ".join(result.stdout.split())
    assert "service_network.leak -> listener_operator.constants" in output
    assert "13 kept, 1 broken" in output


def test_the_site_controllers_plan_may_do_no_io(tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    plan = root / "src/service_network/site/plan.py"
    plan.write_text(plan.read_text() + "\nimport asyncio  # noqa: E402\n")
    outcomes = root / "src/service_network/site/outcomes.py"
    outcomes.write_text(outcomes.read_text() + "\nimport service_network.site.writer  # noqa: E402\n")

    result = lint_imports(root)

    assert result.returncode != 0, result.stdout
    output = " ".join(result.stdout.split())
    assert ("The site controller's plan (its snapshot, the plan, the typed results) does no I/O: no client, no "
            "caches, no asyncio BROKEN") in output
    assert "service_network.site.plan -> asyncio" in output
    assert "service_network.site.outcomes -> service_network.site.writer" in output
    assert "13 kept, 1 broken" in output


def test_kubesim_circles_are_refused_also_when_only_type_checking_imports_close_them(tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    back = "\nfrom typing import TYPE_CHECKING  # noqa: E402\n\nif TYPE_CHECKING:\n    from {} import {}  # noqa\n"
    for module, imported, name in (("store/store.py", "kubesim.registry.admission", "Admission"),
                                   ("store/gc.py", "kubesim.store.store", "Store"),
                                   ("server/logs.py", "kubesim.server.app", "ApiServer")):
        path = root / "src/kubesim" / module
        path.write_text(path.read_text() + back.format(imported, name))
    package = root / "src/kubesim/cluster/__init__.py"
    package.write_text(package.read_text() + "\nfrom kubesim.cluster.cluster import Cluster  # noqa: E402,F401\n")

    result = lint_imports(root)

    assert result.returncode != 0, result.stdout
    output = " ".join(result.stdout.split())
    assert "kubesim's modules and packages import each other in one direction only BROKEN" in output
    assert "No cycles are allowed in kubesim. " in output and "- .store -> .registry" in output
    assert "No cycles are allowed in kubesim.server." in output
    assert "kubesim.store.store -> kubesim.registry.admission" in output
    assert "kubesim.store.gc -> kubesim.store.store" in output
    assert "kubesim.server.logs -> kubesim.server.app" in output
    assert "kubesim.cluster -> kubesim.cluster.cluster" in output
    assert "9 kept, 5 broken" in output


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    result = lint_imports(copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
