from plm_toolkit.config.schema import (
    DataConfig,
    HardwareConfig,
    OptimizerConfig,
    TokenizerConfig,
    TrainConfig,
    TrainerConfig,
    register_schemas,
)

__all__ = [
    "DataConfig",
    "HardwareConfig",
    "OptimizerConfig",
    "TokenizerConfig",
    "TrainConfig",
    "TrainerConfig",
    "register_schemas",
]
