"""A suite's rows, kept as they come: bench.py's main sets Rows.hook, which rewrites the JSON with
the rows of the finished suites and those of the running one, so a call stopped by its time limit
in the middle of a suite keeps what it measured."""


class Rows(list):
    hook = None  # callable(this suite's rows so far), or None

    def append(self, row):
        super().append(row)
        if Rows.hook is not None:
            Rows.hook(self)
