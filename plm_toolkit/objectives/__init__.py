"""Pretraining objectives, one module each; ``plm_toolkit.catalog.load_all`` imports them, which registers each
one in ``plm_toolkit.registry.OBJECTIVES``."""
