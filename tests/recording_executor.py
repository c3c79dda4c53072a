"""A fake executor for the request pipeline's deadline tests: one denoise rank and one decode rank
that answer at once, every call kept with its bound (`calls`: (method, args, timeout))."""


class RecordingExecutor:
    def __init__(self, first_swap_bytes: int = 0):
        self.first_swap_bytes = first_swap_bytes  # what rank 0's first expert swap reads
        self.calls: list[tuple[str, tuple, float | None]] = []
        self.steps = 0

    def _record(self, method, args, timeout):
        self.calls.append((method, args, timeout))
        if method == "begin":
            self.steps = 0
            return 2
        if method == "step":
            self.steps += 1
            return self.steps
        if method == "first_swap_bytes":
            return self.first_swap_bytes
        return {} if method in ("encode_prompt", "job_report") else None

    def call(self, method, *args, timeout=None):
        return [self._record(method, args, timeout)]

    def call_rank(self, rank, method, *args, timeout=None):
        return self._record(method, args, timeout)

    def call_all(self, method, *args, timeout=None):
        return [self._record(method, args, timeout)]
