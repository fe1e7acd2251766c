"""Who is asking and what they may do: ``authn`` (bearer tokens, ``User``, ``RequestAttributes``, the
``Authorizer`` interface, ``AllowAll``), ``rbac`` (RBAC rules and the authorizers evaluating them) and
``serviceaccounts`` (ServiceAccount tokens and their admission plugin's token volume). The API server's handlers
answering with them (403s, SelfSubjectAccessReview, TokenRequest) are ``kubesim.server.authz`` and
``kubesim.server.tokens``.
"""
