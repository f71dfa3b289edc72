"""What `plm-train` and `plm-finetune` do around their run: the Hydra run directory in, a one-line error out."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from plm_toolkit.errors import PlmError
from plm_toolkit.training.distributed import destroy_process_group

log = logging.getLogger("plm_toolkit")


def run_command(run: Callable[[DictConfig, Path], dict], cfg: DictConfig) -> float | None:
    """Run in Hydra's output directory; a PlmError (bad input, impossible config) exits 1 with its message alone.
    Returns the final evaluation loss (else the training loss) for Hydra sweepers that optimise an objective."""
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        final = run(cfg, run_dir)
    except PlmError as err:
        log.error("error: %s", err)
        sys.exit(1)
    finally:
        destroy_process_group()
    return final.get("eval_loss", final.get("loss"))
