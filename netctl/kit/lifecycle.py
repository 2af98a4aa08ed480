"""What the kit's servers and clusters share: ``open`` that takes everything back when it
fails, and the context manager around it (:class:`Opened`)."""

from __future__ import annotations

from typing import Self


class Opened:
    """``open`` (``_open``; on a failure ``close`` takes back what it made, then the error
    goes on) and the context manager around ``open`` and ``close``."""

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError
