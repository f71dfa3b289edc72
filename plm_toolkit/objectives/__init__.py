"""Pretraining objectives; importing this package registers each one in ``plm_toolkit.registry.OBJECTIVES``."""
