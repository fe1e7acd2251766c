"""``BoundedCache``: the site controller's memories keep at most their limit, dropping the least recently used."""

from __future__ import annotations

import pytest

from service_network.site.bounded import DEFAULT_LIMIT, BoundedCache


def test_keeps_at_most_its_limit_dropping_the_least_recently_used() -> None:
    cache: BoundedCache[str, int] = BoundedCache(limit=3)
    for n, key in enumerate("abc"):
        cache.put(key, n)
    assert cache.get("a") == 0          # "a" is now the most recently used: "b" goes first
    cache.put("d", 3)
    assert len(cache) == 3
    assert "b" not in cache
    assert [cache.get(k) for k in "acd"] == [0, 2, 3]


def test_add_says_whether_a_key_is_new() -> None:
    cache: BoundedCache[tuple[str, str], bool] = BoundedCache(limit=2)
    assert cache.add(("uid", "note"), True) is True
    assert cache.add(("uid", "note"), True) is False
    cache.add(("other", "a"), True)
    cache.add(("other", "b"), True)      # drops ("uid", "note"): said again, once
    assert cache.add(("uid", "note"), True) is True


def test_an_entry_may_be_none_and_is_told_apart_by_membership() -> None:
    cache: BoundedCache[str, float | None] = BoundedCache()
    cache.put("done", None)
    assert "done" in cache and cache.get("done") is None
    assert "never" not in cache
    assert cache.pop("done") is None and "done" not in cache


def test_the_default_limit_and_a_limit_below_one() -> None:
    cache: BoundedCache[int, int] = BoundedCache()
    for n in range(DEFAULT_LIMIT + 10):
        cache.put(n, n)
    assert len(cache) == DEFAULT_LIMIT and 0 not in cache and DEFAULT_LIMIT + 9 in cache
    with pytest.raises(ValueError):
        BoundedCache(limit=0)
