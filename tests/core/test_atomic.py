"""Files the toolkit writes get the permissions of any other new file: 0666 less the umask; an output that finds no
room (a full disk, a quota, a file-size limit) is named, not the temporary path it was written under."""

import errno
import os
import stat

import pytest
import torch
from safetensors.torch import load_file

from plm_toolkit.core.atomic import atomic_file, atomic_folder, save_safetensors
from plm_toolkit.core.errors import WriteError


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


def full_disk_write(path):
    """A write as a full disk fails it: open succeeds, write raises ENOSPC with no file name."""
    with open(path, "w"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("writer", ["folder", "file"])
def test_an_output_that_finds_no_room_is_named_and_left_as_it_was(tmp_path, writer):
    final = tmp_path / ("out" if writer == "folder" else "out.jsonl")
    final.mkdir() if writer == "folder" else final.write_text("earlier\n")
    with pytest.raises(WriteError) as failed:
        if writer == "folder":
            with atomic_folder(final) as tmp:
                full_disk_write(tmp / "config.json")
        else:
            with atomic_file(final) as tmp:
                full_disk_write(tmp)
    assert str(failed.value) == (
        f"{final}: could not be written (No space left on device); the partial copy is removed and {final} is as it "
        "was: free space on its file system (or raise the quota or file-size limit) and run the command again"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [final.name]
    assert (final.is_dir() and not any(final.iterdir())) or final.read_text() == "earlier\n"


def test_a_rust_library_error_for_a_full_disk_names_the_output_and_others_pass_through(tmp_path):
    quota = pytest.raises(WriteError, match=r"out: could not be written \(Disk quota exceeded\)")
    with quota, atomic_folder(tmp_path / "out"):
        raise Exception("Error while serializing: IoError(Os { code: 122 }) (os error 122)")
    with pytest.raises(FileNotFoundError), atomic_folder(tmp_path / "out") as tmp:  # not a want of room: as raised
        (tmp / "missing" / "file").read_text()
