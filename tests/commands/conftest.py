"""The end-to-end command tests share the training and fine-tuning fixtures (a small corpus, Hydra composition, a
tiny pretrained checkpoint)."""

from tests.tasks.conftest import finetune_config, tiny_checkpoint  # noqa: F401
from tests.training.conftest import gpt_run, make_config, small_corpus  # noqa: F401
