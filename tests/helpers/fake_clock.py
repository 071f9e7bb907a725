"""A controllable clock for tests: store object timestamps and managers' monotonic time."""


class Clock:
    """One controllable clock (seconds since the epoch) for ``MemoryStore(clock=...)`` timestamps and
    ``CheckpointManager(clock=...)`` time; it moves only by :meth:`advance`."""

    def __init__(self, t: float = 1_750_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds
