"""Model families, one module each; ``plm_toolkit.core.catalog.load_all`` imports them, which registers each one in
``plm_toolkit.core.registry.MODELS``. Their Hugging Face and bilm-tf adapters live in ``plm_toolkit.interop``."""
