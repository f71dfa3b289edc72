"""The one place where an expected failure becomes one line on stderr: ``error: <what and where>``, exit status 1,
no traceback.

Expected failures are ours (``PlmError``: bad data, config or checkpoint), Hydra's (a misspelt key, an unknown
group option, a value of the wrong type, an override that does not parse), OmegaConf's (an interpolation that does
not resolve) and the operating system's (a run directory that cannot be created or written, a full disk). Anything
else is a bug and keeps its traceback. The entry points run Hydra with ``HYDRA_FULL_ERROR=1`` so that its
exceptions reach ``guard`` instead of being printed over several lines by Hydra itself. The commands that take
positional arguments instead (plm-export, plm-average) parse them with ``ArgumentParser`` below and ``report`` their
failures themselves.

Under torchrun every rank usually fails alike (the same config, the same files): the line is printed once between
them, by rank 0 when it fails too, and every rank still exits with status 1 (``_prints_it``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import sys
import time
from collections.abc import Callable
from typing import NoReturn

import yaml
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from plm_toolkit.commands.live_runs import live_run_line
from plm_toolkit.config.overrides import quoting_hint
from plm_toolkit.core.errors import PlmError
from plm_toolkit.core.launch import launched_rank, launcher_store
from plm_toolkit.core.names import did_you_mean, key_names

# Set by run_harness.run_command once Hydra has created the run directory and handed over: an OSError before then is
# about the run directory.
_task_started = False
# Set when a run failed with an expected failure (already reported), so that the command exits with status 1.
_failed = False
# Failures this process reported: each rank's n-th is matched with the other ranks' n-th (the runs of a sweep).
_reports = 0
# How long a rank other than 0 gives rank 0 to report the same failure, so that the line comes from rank 0 whenever it
# fails too: its output is the one that `torchrun --local-ranks-filter 0` and per-rank logs are read for.
RANK0_GRACE_S = 5.0


def task_started() -> None:
    global _task_started
    _task_started = True


def report(err: BaseException) -> bool:
    """Print the one line of an expected failure on stderr and remember to exit 1; False for a bug."""
    global _failed
    if isinstance(err, BrokenPipeError):
        _stdout_closed()
        _failed = True
        return True
    line = explain(err)
    # A checkpoint of a run that is still training, pruned while it was read: said as that, whatever the reader hit.
    line = live_run_line(line or f"{err} {getattr(err, 'filename', '') or ''}") or line
    if line is None:
        return False
    if _prints_it(line):
        print(f"error: {line}", file=sys.stderr, flush=True)
    _failed = True
    return True


def _stdout_closed() -> None:
    """The reader of stdout went away (``plm-generate ... | head -1``): nothing to report, as for other Unix tools.
    Python would still flush stdout at exit and print a second BrokenPipeError, so stdout goes to /dev/null."""
    with contextlib.suppress(OSError, ValueError):  # stdout already closed or not a file
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _prints_it(line: str) -> bool:
    """Whether this process prints ``line``: always, except under torchrun, where the ranks that report the same
    line print it once between them, through torchrun's store. Rank 0 claims the line at once; another rank first
    gives rank 0 ``RANK0_GRACE_S`` to claim it, then claims it itself, so a failure only some ranks hit (a file one
    node cannot read, a bad shard) is still printed, by the first of them. Without the store, every rank prints."""
    global _reports
    n, _reports = _reports, _reports + 1
    try:
        store = launcher_store("plm_toolkit/failures")
        if store is None:
            return True
        rank = launched_rank()
        if rank != 0:
            deadline = time.monotonic() + RANK0_GRACE_S
            # check() polls quietly; a wait() that times out logs C++ warnings on stderr.
            while not store.check([f"{n}/rank_0"]) and time.monotonic() < deadline:
                time.sleep(0.05)
        first = store.add(f"{n}/{hashlib.sha1(line.encode()).hexdigest()}", 1) == 1
        if rank == 0:
            store.set(f"{n}/rank_0", "reported")
        return first
    except (RuntimeError, ValueError, KeyError):  # torch's DistError is a RuntimeError
        return True


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip() if text.strip() else ""


def _missing_option(err: MissingConfigException) -> str:
    """``model=bert_huge``: Hydra lists the group's options over many lines; name the closest and the rest."""
    missing = err.missing_cfg_file or ""
    group, _, option = missing.rpartition("/")
    if not group or err.options is None:
        return _first_line(str(err))
    options = [o for o in err.options if not o.startswith("schema")]
    return (
        f"{group}={option}: no such option in the config group '{group}'{did_you_mean(option, options)} "
        f"(options: {', '.join(options)})"
    )


def _composition(err: HydraException) -> str:
    cause = err.__cause__
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and getattr(cause, "full_key", None):
        # A misspelt key: Hydra suggests `+key=value`, which would add the typo; suggest the real key instead.
        full_key = str(cause.full_key)
        parent, _, key = full_key.rpartition(".")
        names = key_names(cause.object_type)
        if not parent:  # a top-level name may also be a config group
            names = sorted(set(names) | {"experiment"})
        hint = did_you_mean(key, names, prefix=f"{parent}." if parent else "")
        valid = f" (valid keys: {', '.join(names)})" if names and not hint else ""
        return f"{full_key}: unknown key{hint}{valid}"
    group = re.match(r"Could not override '([^']+)'\. No match in the defaults list", str(err))
    if group:  # `plm-finetune model=bert_base`: model is a section of keys there, not a group of presets
        key = group.group(1)
        return f"{key}: not a config group of this command; set its keys as {key}.<key>=<value> (see --help)"
    if isinstance(cause, OmegaConfBaseException):
        where = getattr(cause, "full_key", None)
        override = _first_line(str(err)).removeprefix("Error merging override ")
        # A field inside a list or dict value (data.sources=[{...,weight:lots}]) is named too.
        inner = f"{where}: " if override and where and not override.split("=")[0].endswith(str(where)) else ""
        return f"{override or where}: {inner}{_first_line(str(cause))}"
    joined = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    return _preset_key(joined) or joined


def _preset_key(message: str) -> str | None:
    """A preset (a recipe) that sets a key the chosen config of its section lacks: ``experiment=
    transformer_base_paper data=text_files`` sets data.max_tokens, a key of data=parallel only."""
    found = re.match(r"In '([^']+)': ConfigKeyError raised while composing config: Key '([^']+)' not in "
                     r"'([^']+)' full_key: (\S+)", message)  # fmt: skip
    if found is None:
        return None
    preset, key, schema, full_key = found.groups()
    group, _, option = preset.partition("/")
    section = full_key.rpartition(".")[0]
    line = f"{group}={option} sets {full_key}, which the config chosen for {section} ({schema}) has no key for"
    from plm_toolkit.core.data_schema import ParallelDataConfig

    if section == "data" and key in key_names(ParallelDataConfig):
        return f"{line}: the recipe trains on sentence pairs and needs data=parallel; drop the data= override"
    return f"{line}; choose the {section} config the recipe was written for"


def _os_error(err: OSError) -> str:
    path = err.filename or ""
    reason = err.strerror or type(err).__name__
    if not _task_started:
        return (
            f"hydra.run.dir: cannot create or write the run directory ({path}: {reason}); it must be a folder this "
            "user can create and write to: give another with hydra.run.dir=DIR"
        )
    return f"{path}: {reason}" if path else f"{reason}: {err}"


def _yaml_error(err: yaml.YAMLError) -> str:
    """file:line:column of a YAML file that does not parse, and what the parser expected there."""
    mark = getattr(err, "problem_mark", None)
    where = f"{mark.name}:{mark.line + 1}:{mark.column + 1}" if mark else "a config file"
    problem = getattr(err, "problem", None) or _first_line(str(err))
    context, start = getattr(err, "context", None), getattr(err, "context_mark", None)
    if context and start:
        context += f" from line {start.line + 1}, column {start.column + 1}"
    return f"{where}: not valid YAML ({f'{context}: ' if context else ''}{problem})"


def explain(err: BaseException) -> str | None:
    """The one line that explains an expected failure, or None for a bug (which keeps its traceback)."""
    if isinstance(err, PlmError):
        return " ".join(str(err).split("\n"))
    if isinstance(err, MissingConfigException):
        return _missing_option(err)
    if isinstance(err, OverrideParseException):
        reason = _first_line(re.sub(r"^Error parsing override '.*'$", "", str(err), flags=re.M))
        if reason.startswith("LexerNoViableAltException"):
            reason = "a character that Hydra's grammar allows only inside quotes"
        return f"cannot parse the override {err.override} ({reason}); {quoting_hint(err.override)}"
    ambiguous = isinstance(err, HydraException) and re.match(r"Ambiguous value for argument '(.*)'\n", str(err))
    if ambiguous:  # an unquoted comma: Hydra would read a list, or a sweep with --multirun
        override = ambiguous.group(1)
        return f"cannot read the override {override}: its comma makes a list or a sweep; {quoting_hint(override)}"
    if isinstance(err, HydraException):
        return _composition(err)
    if isinstance(err, yaml.YAMLError):  # a config file of the user's own (--config-dir, --config-name)
        return _yaml_error(err)
    if isinstance(err, OmegaConfBaseException):
        where = getattr(err, "full_key", None)
        return f"{where}: {_first_line(str(err))}" if where else _first_line(str(err))
    if isinstance(err, OSError):
        return _os_error(err)
    # logging.config wraps the log file's OSError (a run directory that cannot be written) in a ValueError.
    if isinstance(err, ValueError) and isinstance(err.__cause__, OSError):
        return explain(err.__cause__)
    return None


def guard(main: Callable[[], object]) -> None:
    """Run a Hydra entry point; an expected failure prints one line on stderr and exits with status 1.

    A run's own failures are reported by ``run_harness.run_command`` as they happen (a sweep goes on with its other
    runs); the ones before a run starts (composition, the run directory) arrive here as exceptions."""
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        main()
    except KeyboardInterrupt as err:  # Ctrl-C outside training (which saves first), or a second one
        interrupted(err)
    except Exception as err:
        if not report(err):
            raise
    if _failed:
        sys.exit(1)


def interrupted(err: KeyboardInterrupt) -> NoReturn:
    """Ctrl-C: one line instead of Python's traceback, and the status a shell gives a process SIGINT stopped."""
    line = str(err) or "interrupted (Ctrl-C)"
    print(f"error: {line}", file=sys.stderr, flush=True)
    sys.exit(getattr(err, "status", 130))  # a preparation stopped by SIGTERM or SIGHUP: 128 + its number


class ArgumentParser(argparse.ArgumentParser):
    """The parser of the commands without Hydra (plm-export, plm-average): a usage error is one ``error:`` line with
    the usage and exit status 1, as every other bad input (argparse prints two lines and exits 2)."""

    def error(self, message: str) -> NoReturn:
        usage = " ".join(self.format_usage().split()).removeprefix("usage: ")
        print(f"error: {message} (usage: {usage})", file=sys.stderr, flush=True)
        sys.exit(1)
