"""Model families; importing this package registers each one in ``plm_toolkit.registry.MODELS``."""

from plm_toolkit.models import albert, bert, electra, t5, transformer_xl, xlnet  # noqa: F401
