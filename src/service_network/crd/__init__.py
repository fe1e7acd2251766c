"""The ``skupper.io/v2alpha1`` custom resources: pydantic models (``models.py``), generated CRDs
(``generate.py``) and ``service-network crd`` (``command.py``)."""
