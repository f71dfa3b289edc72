"""Composing and checking a command's config: resolve (once per run), generic validation, numbers, the reference."""

from omegaconf import OmegaConf

from plm_toolkit.core.command_schema import register_schemas


def setup() -> None:
    """What Hydra needs before it composes a plm-train or plm-finetune config, done once by the entry points (and by
    anything else that composes, such as tests): the schemas, every registered model, objective and task in the
    ConfigStore, and the resolvers the presets use. Calling it again is harmless."""
    from plm_toolkit.config.help import register_help_resolver
    from plm_toolkit.core.cache import register_cache_resolver
    from plm_toolkit.core.catalog import load_all
    from plm_toolkit.core.resources import register_resolvers
    from plm_toolkit.core.run_lock import launch_tag
    from plm_toolkit.data.sources.bundled import register_bundled_resolver

    register_schemas()
    load_all()
    register_resolvers()
    register_cache_resolver()
    register_bundled_resolver()
    register_help_resolver()
    if not OmegaConf.has_resolver("plm_launch_tag"):
        # Cached, as Hydra's ${now:}: a sweep's jobs resolve their directories to the one the launcher made.
        OmegaConf.register_new_resolver("plm_launch_tag", launch_tag, use_cache=True)
