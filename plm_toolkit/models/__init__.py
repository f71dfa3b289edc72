"""Model families; importing this package registers each one in ``plm_toolkit.registry.MODELS``."""
