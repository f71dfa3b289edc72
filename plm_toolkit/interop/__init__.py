"""Checkpoints of other toolkits, read and written: each family's Hugging Face adapter (``hf_<family>.py``: name
tables and config translation, registered in ``hf.ADAPTERS``), fine-tuned task heads (``hf_heads.py``), ELMo's
bilm-tf files (``elmo_bilm_tf.py``), and the loader of any checkpoint folder (``pretrained.py``).
``plm_toolkit.core.catalog.load_all`` imports every module here, which registers the adapters."""
