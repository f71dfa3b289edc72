"""Fine-tuning tasks; ``plm_toolkit.core.catalog.load_all`` imports them, which registers each one in
``plm_toolkit.core.registry.TASKS``."""
