"""The one error a family's problems are: one line that names the file."""

from __future__ import annotations


class FamilyError(ValueError):
    """A family that cannot be graded as it is, in one line naming the file."""
