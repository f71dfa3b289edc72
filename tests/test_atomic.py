"""Files the toolkit writes get the permissions of any other new file: 0666 less the umask."""

import os
import stat

import pytest
import torch
from safetensors.torch import load_file

from plm_toolkit.core.atomic import save_safetensors


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_safetensors_files_follow_the_umask(tmp_path, mask):
    previous = os.umask(mask)
    try:
        save_safetensors({"w": torch.arange(3.0)}, tmp_path / "model.safetensors", metadata={"format": "pt"})
    finally:
        os.umask(previous)
    mode = stat.S_IMODE((tmp_path / "model.safetensors").stat().st_mode)
    assert mode == 0o666 & ~mask  # safetensors alone writes 0600 whatever the umask
    assert torch.equal(load_file(tmp_path / "model.safetensors")["w"], torch.arange(3.0))
