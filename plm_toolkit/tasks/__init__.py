"""Fine-tuning tasks; importing this package registers each one in ``plm_toolkit.registry.TASKS``."""

from plm_toolkit.tasks import glue, ner, seq2seq, squad  # noqa: F401
