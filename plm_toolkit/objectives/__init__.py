"""Pretraining objectives; importing this package registers each one in ``plm_toolkit.registry.OBJECTIVES``."""

from plm_toolkit.objectives import clm, knowledge_masking, mlm, mlm_nsp, mlm_sop, nsp, plm, rtd, sop  # noqa: F401
