"""plm_toolkit: config-driven pretraining and fine-tuning of the classic pretrained language models."""

__version__ = "0.1.0"
