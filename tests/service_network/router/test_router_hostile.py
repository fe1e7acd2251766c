"""Hostile names are opaque text: routing keys and names that look like configuration, paths or anything else are
carried as they are and bind nothing else; addresses that cannot be used are refused with the field named."""

from __future__ import annotations

import json

import pytest
from router_support import (
    document,
    free_port,
    loopback,
    refused,
    running_router,
    target_connectors,
    wait_until,
    who,
)

from service_network.router.config import parse_config
from service_network.router.errors import ConfigError


async def test_hostile_keys_and_names_are_opaque_text(state_dir, start_backend):
    host = loopback()
    port = free_port(host)
    evil_port = free_port(host)
    evil_key = f"k\nfrontend evil\n    bind {host}:{evil_port}\n    default_backend x # ; \\ \"quoted\" {{}}"
    long_key = "ключ-" + "x" * 300 + " #" * 50
    backend = await start_backend("pod")
    other = await start_backend("pod-2")
    listeners = [{"name": "name with spaces # and ; semicolons\nnewline", "routingKey": evil_key, "host": host,
                  "port": port},
                 {"name": "long", "routingKey": long_key, "host": host, "port": free_port(host)}]
    connectors = [{"name": "c/../../etc ; x", "routingKey": evil_key, "port": backend.port,
                   "targets": [{"host": backend.host, "name": "pod name\twith tab"}]},
                  *target_connectors(long_key, [other])]
    async with running_router(state_dir, document(listeners=listeners, connectors=connectors)) as router:
        assert router.problems == []
        assert (await wait_until(lambda: _who(host, port), what="the hostile key's listener")) == "pod"
        assert (await wait_until(lambda: _who(host, listeners[1]["port"]), what="the long key's listener")) == "pod-2"
        assert await refused(host, evil_port), "nothing was bound at the port the key names"


async def _who(host: str, port: int) -> str | None:
    try:
        return (await who(host, port))[0] or None
    except OSError:
        return None


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("listeners[0].host", "127.0.0.1:80 ssl crt /etc/passwd", "is not an IP address"),
    ("listeners[0].host", "127.0.0.1\n", "is not an IP address"),
    ("connectors[0].targets[0].host", "10.0.0.1 backup", "neither an IP address nor a DNS name"),
    ("connectors[0].targets[0].host", "a.b\nserver x", "neither an IP address nor a DNS name"),
    ("listeners[0].routingKey", "", "at least 1 character"),
    ("listeners[0].routingKey", "\ud800", "not valid Unicode"),
])
def test_unsafe_values_refused_with_field_path(field, value, expected):
    doc = document(listeners=[{"name": "l", "routingKey": "k", "host": "127.0.50.1", "port": 1024}],
                   connectors=[{"name": "c", "routingKey": "k", "port": 80, "targets": [{"host": "127.0.50.2"}]}])
    section, rest = field.split("[0].", 1)
    if "." in rest:
        sub, key = rest.split("[0].")
        doc[section][0][sub][0][key] = value
    else:
        doc[section][0][rest] = value
    with pytest.raises(ConfigError) as info:
        parse_config(json.dumps(doc))
    text = str(info.value)
    assert field in text and expected in text
    assert len(text) < 600, "errors never echo a huge input"
