"""One range check over every number of every command's config (config/numbers.py): setting any numeric key of a
composed config to NaN, an infinity, a subnormal float or an integer past 64 bits is refused by validation with a
message that names that key, for every family's keys; never accepted, never a traceback or a hang. And the text
keys set on the command line keep the text as typed (config/overrides.py)."""

import math
import signal

import pytest
from hydra import compose, initialize_config_module
from omegaconf import DictConfig, OmegaConf

import plm_toolkit.commands.finetune  # noqa: F401  (registers schemas, registries and resolvers)
import plm_toolkit.commands.train  # noqa: F401
from plm_toolkit.config.overrides import keep_typed_text, list_elements
from plm_toolkit.config.validate import validate
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.resources import resource_path

CORPUS = resource_path("corpora/wikitext2/train.txt")
CONFIGS = {
    "bert": ("train", []),
    "t5": ("train", ["model=t5_tiny", "objective=span_corruption"]),
    "transformer": ("train", ["model=transformer_tiny", "data=parallel", "objective=translation"]),
    "elmo": ("train", ["model=elmo_tiny", "objective=bilm", "data.tokenizer.kind=word"]),
    "ernie": ("train", ["model=ernie_tiny", "objective=knowledge_masking"]),
    "finetune": ("finetune", ["model.checkpoint=/tmp"]),
    "translation": ("finetune", ["model.checkpoint=/tmp", "task=translation"]),
}


def numbers(node: DictConfig, prefix: str = ""):
    """(key, value) of every int or float leaf under ``node``."""
    for key in node:
        if OmegaConf.is_missing(node, key):
            continue
        value = node[key]
        if isinstance(value, DictConfig):
            yield from numbers(value, f"{prefix}{key}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield f"{prefix}{key}", value


def _hang(*_):
    raise TimeoutError("validation did not finish")


@pytest.mark.parametrize("name", CONFIGS)
def test_every_number_no_key_can_mean_is_refused_naming_its_key(name):
    command, overrides = CONFIGS[name]
    files = [f"data.train_files=[{CORPUS}]"] if command == "train" and "data=parallel" not in overrides else []
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        base = compose(command, overrides=[*files, *overrides])
    validate(base.copy()) if files else None  # the base itself is fine
    previous = signal.signal(signal.SIGALRM, _hang)
    tried = 0
    try:
        for key, value in numbers(base):
            for bad in (math.nan, -math.inf, 1e-320) if isinstance(value, float) else (2**70,):
                cfg = base.copy()
                OmegaConf.update(cfg, key, bad)
                signal.alarm(10)
                with pytest.raises(ConfigError) as refused:
                    validate(cfg)
                signal.alarm(0)
                assert f"{key}=" in str(refused.value), (key, bad, str(refused.value))
                tried += 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert tried > 50


def test_text_keys_keep_the_text_as_typed():
    overrides = ["model.checkpoint=1e3", "task=classification", "task.labels=[false, 'x, y',1.50, neg]"]
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose("finetune", overrides=overrides)
    assert cfg.model.checkpoint == "1000.0" and list(cfg.task.labels) == ["False", "x, y", "1.5", "neg"]  # Hydra's
    keep_typed_text(cfg, overrides)
    assert cfg.model.checkpoint == "1e3" and list(cfg.task.labels) == ["false", "x, y", "1.50", "neg"]
    assert cfg.trainer.max_steps is None or isinstance(cfg.trainer.max_steps, int)  # numbers stay numbers
    assert list_elements("[a, 'b, c', [d, e], \"f\"]") == ["a", "'b, c'", "[d, e]", '"f"']
    assert list_elements("[]") == [] and list_elements("x") == []
