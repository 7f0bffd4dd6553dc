"""The training error type: a run that cannot start or go on, with a message that says why."""


class TrainError(RuntimeError):
    pass
