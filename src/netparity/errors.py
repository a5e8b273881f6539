"""Error types.

One root type, :class:`NetparityError`, and a few subclasses for the kinds of bad input a user can
cause. The CLI turns any ``NetparityError`` into a single line on stderr and exit status 2; any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class NetparityError(Exception):
    """Root of every error a user can cause (bad path, corrupt trace, bad mapping...)."""


class UsageError(NetparityError):
    """The command line or API arguments do not make sense."""


class TraceError(NetparityError):
    """A trace directory is missing, not a trace, corrupt, or has a missing shard."""


class SchemaError(TraceError):
    """A trace was written with a newer schema version than this netparity can read."""


class CheckpointError(NetparityError):
    """A checkpoint cannot be read, is unsafe to load, or cannot be written."""


class MappingError(NetparityError):
    """A name mapping is malformed or does not fit the tensors it maps (e.g. shape mismatch)."""


class FrameworkError(NetparityError):
    """A framework needed for this operation is missing or the object is not supported."""


class InputError(NetparityError):
    """An input file is unsafe to read: a special file, a symlink out of its tree, or a size
    its own header does not declare (a decompression or header bomb)."""
