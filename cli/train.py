"""`nmt-train` (lands with its own issue)."""

from nmt.cli.common import not_implemented

main = not_implemented("nmt-train")
