"""Where tokenizers and tokenized corpora are cached: ``data.cache_dir``, whose default is ``${plm_cache_dir:}``.

The default is ``$PLM_TOOLKIT_CACHE``, else ``~/.cache/plm_toolkit``. A variable that is set but empty counts as
unset, as shells and most tools read it: ``PLM_TOOLKIT_CACHE=`` once wrote the cache into the working directory
(``Path("")`` is ``.``), and so did an unset ``HOME``. The folder is created and checked writable before anything is
read, so that a read-only cache is named as such, not blamed on the corpus that was being read when writing failed.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from plm_toolkit.core.errors import ConfigError

if TYPE_CHECKING:
    from plm_toolkit.core.data_schema import DataConfig

ENVIRONMENT_VARIABLE = "PLM_TOOLKIT_CACHE"


def default_cache_dir() -> str:
    """``$PLM_TOOLKIT_CACHE``, else ``<home>/.cache/plm_toolkit``; an empty variable counts as unset, and the home
    folder comes from the user database when ``HOME`` is empty or unset."""
    chosen = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if chosen:
        return chosen
    home = os.environ.get("HOME", "").strip() or _home_from_user_database()
    return str(Path(home) / ".cache" / "plm_toolkit")


def _home_from_user_database() -> str:
    try:
        import pwd  # POSIX only

        return pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError):
        return str(Path.home())


def register_cache_resolver() -> None:
    """``${plm_cache_dir:}``, the default of ``data.cache_dir``. Calling it again is harmless."""
    if not OmegaConf.has_resolver("plm_cache_dir"):
        OmegaConf.register_new_resolver("plm_cache_dir", default_cache_dir)


def cache_root(data_cfg: DataConfig) -> Path:
    """The data cache directory (``data.cache_dir``, empty meaning the default), ``~`` expanded, created and checked
    writable; ConfigError naming the folder when it cannot be."""
    value = str(data_cfg.cache_dir or "").strip()
    path = Path(os.path.expanduser(value or default_cache_dir()))
    try:
        path.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".write-test-", dir=path)
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ConfigError(
            f"data.cache_dir={path}: cannot create or write the data cache there ({reason}); give a writable folder "
            f"with data.cache_dir=DIR or {ENVIRONMENT_VARIABLE}=DIR"
        ) from None
    return path


def stable_hash(*parts: Any) -> str:
    """A short hex digest of the parts' text, stable across processes and Python runs (unlike hash()): the key of
    what is cached under the parts' settings."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(repr(part).encode("utf-8"))
        digest.update(b"\x1f")
    return digest.hexdigest()[:24]
