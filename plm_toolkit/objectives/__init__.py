"""Pretraining objectives; importing this package registers each one in ``plm_toolkit.registry.OBJECTIVES``."""

from plm_toolkit.objectives import clm, mlm, mlm_nsp, mlm_sop, nsp, plm, rtd, sop, translation  # noqa: F401
