"""lightkube classes for our custom resources.

lightkube has no models for custom kinds; its generic resources give typed-enough handles (dict-like objects) that
work with get/list/watch/apply and with the ``Status`` subresource of Listener.
"""

from __future__ import annotations

from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from listener_operator.constants import API_GROUP, API_VERSION

ListenerClass = create_global_resource(API_GROUP, API_VERSION, "ListenerClass", "listenerclasses")
Listener = create_namespaced_resource(API_GROUP, API_VERSION, "Listener", "listeners")
PodListeners = create_namespaced_resource(API_GROUP, API_VERSION, "PodListeners", "podlisteners")

__all__ = ["Listener", "ListenerClass", "PodListeners"]
