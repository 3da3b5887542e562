"""Where the field helpers used to live: plugins written against ``nmt.config.fields`` keep working.
The helpers are in :mod:`nmt.fields` (below ``nmt.registry`` and ``nmt.config``, which both use them)."""

from nmt.fields import (  # noqa: F401
    allowed_text,
    as_group,
    check_values,
    flag_of,
    inherited_group,
    literal,
    opt,
    plugin_group,
    to_dataclass,
    value_error,
)
