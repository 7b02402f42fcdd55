"""What a bad snapshot is reported as: problems that name the file and line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

import msgspec

#: How many problems a load collects before it stops looking for more.
MAX_PROBLEMS = 100
#: What decoding bytes that are not what they should be raises: msgspec raises UnicodeDecodeError,
#: not a DecodeError, for a string that is not UTF-8.
DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError)


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"


class SnapshotError(Exception):
    """A snapshot that cannot be served, with every problem found in it."""

    def __init__(self, path: str, problems: list[Problem], *, what: str = "snapshot") -> None:
        self.path = path
        self.problems = problems
        self.what = what
        shown = "\n".join(f"  {p}" for p in problems)
        more = " (and maybe more)" if len(problems) >= MAX_PROBLEMS else ""
        super().__init__(f"{what} {path} has {len(problems)} problem(s){more}:\n{shown}")


    def __reduce__(self) -> tuple:
        """Picklable as it was made (a process that reads a snapshot for another sends it back)."""
        return type(self), (self.path, self.problems), {"what": self.what}

    def summary(self, most: int = 3, name: str | None = None) -> str:
        """The problems without filesystem paths: the snapshot by ``name`` or its directory's
        name, files by their names (for /readyz, which anyone may read)."""
        shown = "; ".join(f"{Problem(PurePath(p.file).name, p.line, p.message)}" for p in self.problems[:most])
        more = f" (and {len(self.problems) - most} more)" if len(self.problems) > most else ""
        return f"{self.what} {name or PurePath(self.path).name} has {len(self.problems)} problem(s): {shown}{more}"


class ProblemList(list[Problem]):
    """Problems collected while loading; raises once it holds as many as are worth showing."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def add(self, file: str, line: int | None, message: str) -> None:
        self.append(Problem(file, line, message))
        if len(self) >= MAX_PROBLEMS:
            raise SnapshotError(self.path, list(self))

    def raise_if_any(self) -> None:
        if self:
            raise SnapshotError(self.path, list(self))
