"""The one error every checkpoint reader raises; its own module so that the readers (io, verify,
shard_digests) can raise it without importing each other."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read, is unsafe to unpickle, is damaged, or does not fit the model."""
