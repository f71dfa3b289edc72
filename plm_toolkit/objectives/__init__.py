"""Pretraining objectives, one module each; ``plm_toolkit.core.catalog.load_all`` imports them, which registers each
one in ``plm_toolkit.core.registry.OBJECTIVES``."""
