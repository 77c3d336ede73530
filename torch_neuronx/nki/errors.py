"""The exception NKI kernels raise when they break a rule of the language or
a limit of the hardware. The message names the kernel's source line."""


class NKIError(RuntimeError, ValueError):
    """A kernel broke an NKI rule or a NeuronCore limit.

    ``filename``/``lineno``: the kernel source line that did it (also at the
    start of the message); ``limit``: a short name of the rule, e.g.
    ``"partition-dim"``, ``"sbuf-capacity"``, ``"uninitialized-read"``.
    """

    def __init__(
        self,
        message: str,
        *,
        filename: str | None = None,
        lineno: int | None = None,
        limit: str | None = None,
    ):
        if filename is not None:
            message = f"{filename}:{lineno}: {message}"
        super().__init__(message)
        self.filename = filename
        self.lineno = lineno
        self.limit = limit
