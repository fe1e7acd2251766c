"""Request bodies as the API server decodes them: ``bodies`` (JSON and YAML, with limits and clear errors),
``protobuf`` and ``protobuf_schemas`` (the few protobuf bodies kubectl sends).
"""
