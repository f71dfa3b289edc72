"""ERNIE's knowledge units (and whole-word masking's words) beside the ids. Importing the package registers them as
the token store's side channel of unit ``units`` (``data/store/side_channels.py``): the store imports nothing of
this package. The channel (``data/units/store.py``) is imported when a store of units is first asked for, so that a
worker process importing the package for its encoder (``data/units/corpus.py``) pulls in nothing more."""

from plm_toolkit.data.store.side_channels import register_side_channel

register_side_channel("units", "plm_toolkit.data.units.store:KNOWLEDGE_UNITS")
