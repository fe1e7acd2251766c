"""The demo's reachability report: rendering and what counts as a failure (pure parts of devenv.reach)."""

from __future__ import annotations

from devenv.reach import Reach, format_reach, ready_endpoints, unexpected


def test_ready_endpoints_counts_ready_and_serving_terminating_endpoints() -> None:
    slices = [{"endpoints": [{"conditions": {"ready": True}}, {"conditions": {"ready": False}},
                             {"conditions": {"ready": False, "serving": True, "terminating": True}}, {}]},
              {"endpoints": None}]
    assert ready_endpoints(slices) == 3


def test_a_shared_listener_lists_every_pod_that_answered() -> None:
    reach = Reach("default/web", "127.1.3.1:8080", answered=["web-b", "web-a", "web-b", "web-a"], backends=2)
    [line] = format_reach([reach])
    assert line == "default/web  127.1.3.1:8080 -> web-a, web-b (4 connections)"
    assert unexpected([reach]) == []


def test_a_refusal_without_pods_is_expected_and_with_pods_is_a_failure() -> None:
    empty = Reach("default/api", "api.default.svc.cluster.local:9000", error="connection refused", backends=0)
    broken = Reach("default/b-0", "127.1.1.1:30000", error="connection refused", backends=1)
    lines = format_reach([empty, broken])
    assert lines[0].endswith("-> connection refused (expected: no Pod mounts this Listener)")
    assert lines[1].endswith("-> FAILED: connection refused")
    assert unexpected([empty, broken]) == [broken]


def test_an_address_that_answered_then_failed_is_a_failure() -> None:
    flaky = Reach("default/web", "127.1.3.1:8080", answered=["web-a"], error="no answer within 3s", backends=2)
    assert format_reach([flaky])[0].endswith("-> FAILED: no answer within 3s")
    assert unexpected([flaky]) == [flaky]
