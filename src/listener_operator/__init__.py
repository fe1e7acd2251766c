"""listener-operator: a Python re-implementation of the Stackable Listener Operator."""

__version__ = "0.1.0"
