"""The Kubernetes protobuf field tables kubesim decodes (:mod:`kubesim.server.codecs.protobuf` reads the wire format).

Field numbers, names and which fields are pointers are facts of the Kubernetes API's ``generated.proto`` files
(k8s.io/api and k8s.io/apimachinery); only the kinds and fields kubectl and Helm send as protobuf are here. Types:
``"s"`` string, ``"b"`` bytes (base64 in JSON), ``"i"`` integer, ``"?"`` bool, ``"t"`` Time, ``"io"``
IntOrString, ``"q"`` Quantity, ``("m", type)`` map<string, type>, ``("r", type)`` repeated, or a nested schema
dict; ``"mt"`` MicroTime, ``"-"`` a field the server ignores on write (a status). A type ending in ``"!"`` is a pointer field in Go: sent only when set, so its zero value is kept (``replicas:
0``); other zero values are what JSON's ``omitempty`` leaves out.
"""

from __future__ import annotations

from typing import Any

Schema = dict[int, tuple[str, Any]]

TIME: Schema = {1: ("seconds", "i"), 2: ("nanos", "i")}
_OWNER_REF: Schema = {
    1: ("kind", "s"),
    3: ("name", "s"),
    4: ("uid", "s"),
    5: ("apiVersion", "s"),
    6: ("controller", "?!"),
    7: ("blockOwnerDeletion", "?!"),
}
_OBJECT_META: Schema = {
    1: ("name", "s"),
    2: ("generateName", "s"),
    3: ("namespace", "s"),
    5: ("uid", "s"),
    6: ("resourceVersion", "s"),
    7: ("generation", "i"),
    8: ("creationTimestamp", "t"),
    10: ("deletionGracePeriodSeconds", "i"),
    11: ("labels", ("m", "s")),
    12: ("annotations", ("m", "s")),
    13: ("ownerReferences", ("r", _OWNER_REF)),
    14: ("finalizers", ("r", "s")),
    # an update read-modify-writes the object with its managedFields (client-go: upstream Skupper's controller
    # annotating a Secret); not decoded: kubesim keeps the live object's, as the API server does for a client that
    # sends them back unchanged
    17: ("managedFields", "-"),
}
_POLICY_RULE: Schema = {
    1: ("verbs", ("r", "s")),
    2: ("apiGroups", ("r", "s")),
    3: ("resources", ("r", "s")),
    4: ("resourceNames", ("r", "s")),
    5: ("nonResourceURLs", ("r", "s")),
}
_SUBJECT: Schema = {1: ("kind", "s"), 2: ("apiGroup", "s"), 3: ("name", "s"), 4: ("namespace", "s")}
_ROLE_REF: Schema = {1: ("apiGroup", "s"), 2: ("kind", "s"), 3: ("name", "s")}
_OBJECT_REF: Schema = {
    1: ("kind", "s"),
    2: ("namespace", "s"),
    3: ("name", "s"),
    4: ("uid", "s"),
    5: ("apiVersion", "s"),
}
_LABEL_SELECTOR: Schema = {
    1: ("matchLabels", ("m", "s")),
    2: ("matchExpressions", ("r", {1: ("key", "s"), 2: ("operator", "s"), 3: ("values", ("r", "s"))})),
}
_CONTAINER: Schema = {
    1: ("name", "s"),
    2: ("image", "s"),
    3: ("command", ("r", "s")),
    4: ("args", ("r", "s")),
    5: ("workingDir", "s"),
    6: ("ports", ("r", {1: ("name", "s"), 2: ("hostPort", "i"), 3: ("containerPort", "i"), 4: ("protocol", "s"),
                        5: ("hostIP", "s")})),
    7: ("env", ("r", {1: ("name", "s"), 2: ("value", "s")})),
    8: ("resources", {1: ("limits", ("m", "q")), 2: ("requests", ("m", "q"))}),
    13: ("terminationMessagePath", "s"),
    14: ("imagePullPolicy", "s"),
    16: ("stdin", "?"),
    17: ("stdinOnce", "?"),
    18: ("tty", "?"),
    20: ("terminationMessagePolicy", "s"),
    24: ("restartPolicy", "s"),
}
_POD_SPEC: Schema = {
    2: ("containers", ("r", _CONTAINER)),
    3: ("restartPolicy", "s"),
    4: ("terminationGracePeriodSeconds", "i!"),
    5: ("activeDeadlineSeconds", "i!"),
    6: ("dnsPolicy", "s"),
    7: ("nodeSelector", ("m", "s")),
    8: ("serviceAccountName", "s"),
    9: ("serviceAccount", "s"),
    10: ("nodeName", "s"),
    11: ("hostNetwork", "?"),
    12: ("hostPID", "?"),
    13: ("hostIPC", "?"),
    15: ("imagePullSecrets", ("r", {1: ("name", "s")})),
    16: ("hostname", "s"),
    17: ("subdomain", "s"),
    19: ("schedulerName", "s"),
    20: ("initContainers", ("r", _CONTAINER)),
    21: ("automountServiceAccountToken", "?!"),
    24: ("priorityClassName", "s"),
    25: ("priority", "i!"),
    27: ("shareProcessNamespace", "?!"),
    29: ("runtimeClassName", "s!"),
    30: ("enableServiceLinks", "?!"),
    31: ("preemptionPolicy", "s!"),
    35: ("setHostnameAsFQDN", "?!"),
    37: ("hostUsers", "?!"),
}
_DEPLOYMENT_SPEC: Schema = {
    1: ("replicas", "i!"),
    2: ("selector", _LABEL_SELECTOR),
    3: ("template", {1: ("metadata", _OBJECT_META), 2: ("spec", _POD_SPEC)}),
    4: ("strategy", {1: ("type", "s"), 2: ("rollingUpdate", {1: ("maxUnavailable", "io"), 2: ("maxSurge", "io")})}),
    5: ("minReadySeconds", "i"),
    6: ("revisionHistoryLimit", "i!"),
    7: ("paused", "?"),
    9: ("progressDeadlineSeconds", "i!"),
}
_SERVICE_SPEC: Schema = {
    1: ("ports", ("r", {1: ("name", "s"), 2: ("protocol", "s"), 3: ("port", "i"), 4: ("targetPort", "io"),
                        5: ("nodePort", "i"), 6: ("appProtocol", "s!")})),
    2: ("selector", ("m", "s")),
    3: ("clusterIP", "s"),
    4: ("type", "s"),
    5: ("externalIPs", ("r", "s")),
    7: ("sessionAffinity", "s"),
    8: ("loadBalancerIP", "s"),
    9: ("loadBalancerSourceRanges", ("r", "s")),
    10: ("externalName", "s"),
    11: ("externalTrafficPolicy", "s"),
    12: ("healthCheckNodePort", "i"),
    13: ("publishNotReadyAddresses", "?"),
    17: ("ipFamilyPolicy", "s!"),
    18: ("clusterIPs", ("r", "s")),
    19: ("ipFamilies", ("r", "s")),
    20: ("allocateLoadBalancerNodePorts", "?!"),
    21: ("loadBalancerClass", "s!"),
    22: ("internalTrafficPolicy", "s!"),
    23: ("trafficDistribution", "s!"),
}
_SCALE: Schema = {
    1: ("metadata", _OBJECT_META),
    2: ("spec", {1: ("replicas", "i")}),
    3: ("status", {1: ("replicas", "i"), 2: ("selector", "s")}),
}
KINDS: dict[tuple[str, str], Schema] = {
    ("apps/v1", "Deployment"): {1: ("metadata", _OBJECT_META), 2: ("spec", _DEPLOYMENT_SPEC), 3: ("status", "-")},
    ("v1", "Service"): {1: ("metadata", _OBJECT_META), 2: ("spec", _SERVICE_SPEC), 3: ("status", "-")},
    ("autoscaling/v1", "Scale"): _SCALE,
    ("v1", "Namespace"): {
        1: ("metadata", _OBJECT_META),
        2: ("spec", {1: ("finalizers", ("r", "s"))}),
        3: ("status", {1: ("phase", "s")}),
    },
    ("v1", "ConfigMap"): {
        1: ("metadata", _OBJECT_META),
        2: ("data", ("m", "s")),
        3: ("binaryData", ("m", "b")),
        4: ("immutable", "?"),
    },
    ("v1", "Secret"): {
        1: ("metadata", _OBJECT_META),
        2: ("data", ("m", "b")),
        3: ("type", "s"),
        4: ("stringData", ("m", "s")),
        5: ("immutable", "?"),
    },
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): {
        1: ("metadata", _OBJECT_META),
        2: (
            "spec",
            {
                1: (
                    "resourceAttributes",
                    {
                        1: ("namespace", "s"),
                        2: ("verb", "s"),
                        3: ("group", "s"),
                        4: ("version", "s"),
                        5: ("resource", "s"),
                        6: ("subresource", "s"),
                        7: ("name", "s"),
                    },
                ),
                2: ("nonResourceAttributes", {1: ("path", "s"), 2: ("verb", "s")}),
            },
        ),
    },
    ("authentication.k8s.io/v1", "TokenRequest"): {
        1: ("metadata", _OBJECT_META),
        2: (
            "spec",
            {
                1: ("audiences", ("r", "s")),
                3: ("boundObjectRef", {1: ("kind", "s"), 2: ("apiVersion", "s"), 3: ("name", "s"), 4: ("uid", "s")}),
                4: ("expirationSeconds", "i"),
            },
        ),
    },
    # rbac/v1 (upstream Skupper's controller creates its router's Role and RoleBinding as protobuf)
    ("rbac.authorization.k8s.io/v1", "Role"): {
        1: ("metadata", _OBJECT_META),
        2: ("rules", ("r", _POLICY_RULE)),
    },
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): {
        1: ("metadata", _OBJECT_META),
        2: ("subjects", ("r", _SUBJECT)),
        3: ("roleRef", _ROLE_REF),
    },
    # coordination/v1 (client-go's leader election: upstream Skupper's kube-adaptor)
    ("coordination.k8s.io/v1", "Lease"): {
        1: ("metadata", _OBJECT_META),
        2: ("spec", {
            1: ("holderIdentity", "s!"),
            2: ("leaseDurationSeconds", "i!"),
            3: ("acquireTime", "mt!"),
            4: ("renewTime", "mt!"),
            5: ("leaseTransitions", "i!"),
            6: ("strategy", "s!"),
            7: ("preferredHolder", "s!"),
        }),
    },
    ("v1", "ServiceAccount"): {
        1: ("metadata", _OBJECT_META),
        2: ("secrets", ("r", _OBJECT_REF)),
        3: ("imagePullSecrets", ("r", {1: ("name", "s")})),
        4: ("automountServiceAccountToken", "?"),
    },
}



#: meta/v1 DeleteOptions: optional fields whose presence matters (gracePeriodSeconds 0 means "now").
DELETE_OPTIONS: Schema = {
    1: ("gracePeriodSeconds", "i"),
    2: ("preconditions", {1: ("uid", "s"), 2: ("resourceVersion", "s")}),
    3: ("orphanDependents", "?"),
    4: ("propagationPolicy", "s"),
    5: ("dryRun", ("r", "s")),
    6: ("ignoreStoreReadErrorWithClusterBreakingPotential", "?"),
}


